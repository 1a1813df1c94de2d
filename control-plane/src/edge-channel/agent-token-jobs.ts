// The sweep that closes the streams of agent tokens that have expired: the
// verifier refuses them on new streams at once, and this tells every replica
// to end the streams already open with them.
import { z } from 'zod';
import { MINUTE } from '../core/clock.ts';
import { jobsFor } from '../jobs/index.ts';
import { announceExpiredAgentTokens } from './agent-token-service.ts';
import type { EdgeChannelServices } from './services.ts';

const defineJob = jobsFor<EdgeChannelServices>();

export const agentTokenExpirySweepJob = defineJob({
  type: 'edge.agent-token-expiry-sweep',
  payload: z.object({}),
  recurring: { every: MINUTE },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    const tokens = await announceExpiredAgentTokens(app, rc);
    if (tokens) rc.log.info({ tokens }, 'closed the streams of expired agent tokens');
  },
});
