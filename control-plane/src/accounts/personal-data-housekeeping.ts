// Hourly housekeeping of personal data: archives whose download link expired
// are deleted (GDPR storage limitation: the archive is a full copy of the
// account), exports whose job was lost are marked failed so the account may
// ask again, and accounts whose grace period ended without an erasure job
// (lost, or failed for good) get one again.
import { z } from 'zod';
import { HOUR } from '../core/clock.ts';
import { jobsFor } from '../jobs/index.ts';
import { sweepDataExports } from './data-export-service.ts';
import { enqueueOverdueErasures } from './deletion-service.ts';
import type { AccountsServices } from './services.ts';

const defineJob = jobsFor<AccountsServices>();

export const personalDataHousekeepingJob = defineJob({
  type: 'accounts.personal-data-housekeeping',
  payload: z.object({}),
  recurring: { every: HOUR },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    const exports = await sweepDataExports(app, rc);
    const erasures = await enqueueOverdueErasures(app, rc);
    if (exports.removed || exports.failed || erasures) rc.log.info({ ...exports, erasures_enqueued: erasures }, 'personal-data housekeeping');
  },
});
