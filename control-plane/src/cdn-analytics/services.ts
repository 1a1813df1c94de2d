// What the traffic analytics capability adds to the platform's services (the
// rollup store the control channel writes to and the metrics routes read),
// and the declaration of its routes and jobs.
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import { jobsFor } from '../jobs/index.ts';
import type { RollupStore } from './rollup-store.ts';

export interface AnalyticsServices extends CoreServices {
  /** Where traffic rollups are kept (PostgreSQL here; a columnar store later: docs/decisions.md). */
  trafficRollups?: RollupStore;
}

export const defineAnalyticsRoute = routesFor<AnalyticsServices>();
export const defineAnalyticsJob = jobsFor<AnalyticsServices>();
