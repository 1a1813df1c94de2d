// The sweep that drops signing secrets whose grace period has ended from
// storage (the edge stops accepting them at valid_until in any case).
import { z } from 'zod';
import { MINUTE } from '../core/clock.ts';
import { jobsFor } from '../jobs/index.ts';
import type { CdnServices } from './services.ts';
import { sweepRetiredSecrets } from './signing-key-service.ts';

const defineJob = jobsFor<CdnServices>();

export const retiredSecretsSweepJob = defineJob({
  type: 'cdn.signing-key-grace-sweep',
  payload: z.object({}),
  recurring: { every: 15 * MINUTE },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    const keys = await sweepRetiredSecrets(app, rc);
    if (keys) rc.log.info({ keys }, 'dropped signing secrets whose grace period ended');
  },
});
