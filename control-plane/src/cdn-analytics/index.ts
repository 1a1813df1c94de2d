// Traffic analytics (issue 24 item 4; document 3 §4.13): the rollup store the
// control channel writes the agents' per-minute reports to, the metrics
// routes that read it, and the roll-up and retention jobs.
import { retentionJob, rollupJob } from './jobs.ts';
import { PostgresRollupStore } from './postgres-rollups.ts';
import { metricsRoutes } from './routes.ts';
import type { AnalyticsServices } from './services.ts';

export type { AnalyticsServices } from './services.ts';

export const cdnAnalytics = {
  name: 'cdn-analytics',
  routes: metricsRoutes,
  jobs: [rollupJob, retentionJob],
  async start(_services: AnalyticsServices) {
    return { services: { trafficRollups: new PostgresRollupStore() } };
  },
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { type MinuteRollup, type RollupStore, topUrlKey, type TrafficReportInput } from './rollup-store.ts';
