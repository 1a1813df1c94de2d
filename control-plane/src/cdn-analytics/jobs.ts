// Traffic analytics' recurring work: minutes rolled up to hours and days every
// minute, and once an hour the partitions made ahead, those past retention
// dropped, and report ids older than a day forgotten.
import { z } from 'zod';
import { HOUR, MINUTE } from '../core/clock.ts';
import { defineAnalyticsJob as defineJob } from './services.ts';

export const rollupJob = defineJob({
  type: 'cdn-analytics.rollup',
  payload: z.object({}),
  recurring: { every: MINUTE },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    if (!app.trafficRollups) return;
    const done = await app.trafficRollups.rollUp(rc.em, app.clock.now());
    if (done.hours || done.days) rc.log.debug(done, 'traffic rolled up');
  },
});

export const retentionJob = defineJob({
  type: 'cdn-analytics.retention',
  payload: z.object({}),
  recurring: { every: HOUR },
  retry: { attempts: 3 },
  async handler(rc, _payload, app) {
    if (!app.trafficRollups) return;
    const done = await app.trafficRollups.retain(rc.em, app.clock.now());
    if (done.dropped.length || done.receipts) rc.log.info({ partitions_dropped: done.dropped, report_ids_forgotten: done.receipts }, 'traffic retention');
  },
});
