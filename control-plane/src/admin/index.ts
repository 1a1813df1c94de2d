// The administration capability (document 1 §4.6 and on): users today;
// plans and subscriptions join it with billing.
import { adminUserRoutes } from './user-routes.ts';

export const admin = {
  name: 'admin',
  routes: adminUserRoutes,
};
