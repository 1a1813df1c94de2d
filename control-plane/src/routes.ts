// Every API route of the control plane, gathered from the capability folders.
import { healthRoutes } from './health/routes.ts';
import type { RouteDefinition } from './http/route.ts';

export const routes: RouteDefinition[] = [...healthRoutes];
