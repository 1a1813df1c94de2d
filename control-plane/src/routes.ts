// Every API route of the control plane, gathered from the capability folders.
import { meRoutes } from './accounts/me-routes.ts';
import { adminUserRoutes } from './admin/user-routes.ts';
import { authRoutes } from './auth/routes.ts';
import { healthRoutes } from './health/routes.ts';
import type { RouteDefinition } from './http/route.ts';

export const routes: RouteDefinition[] = [...healthRoutes, ...authRoutes, ...meRoutes, ...adminUserRoutes];
