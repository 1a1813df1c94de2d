// The control channel's housekeeping: the acknowledgements of purges finished
// over an hour ago are deleted (each purge keeps its counts), so the table of
// acks holds recent purges only instead of a row per node for every purge
// ever made.
import { z } from 'zod';
import { MINUTE } from '../core/clock.ts';
import { jobsFor } from '../jobs/index.ts';
import { PURGE_ACK_RETENTION_MS, prunePurgeAcks } from './channel-purges.ts';
import type { EdgeChannelServices } from './services.ts';

const defineJob = jobsFor<EdgeChannelServices>();

export const purgeAckRetentionJob = defineJob({
  type: 'edge.purge-ack-retention',
  payload: z.object({}),
  recurring: { every: 10 * MINUTE },
  retry: { attempts: 3 },
  async handler(rc, _payload, app, run) {
    const now = app.clock.now();
    const purges = await prunePurgeAcks(rc.em, new Date(now.getTime() - PURGE_ACK_RETENTION_MS), now, run.signal);
    if (purges) rc.log.info({ purges }, 'deleted the acknowledgements of finished purges');
  },
});
