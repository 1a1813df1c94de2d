// Readiness of the control plane (document 3 §4.13).
import { healthRoutes } from './routes.ts';

export type { HealthServices } from './routes.ts';

export const health = {
  name: 'health',
  routes: healthRoutes,
};
