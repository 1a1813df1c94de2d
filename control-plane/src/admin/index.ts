// The administration capability (document 1 §4.6 and on): users today;
// plans and subscriptions join it with billing.
import { adminUserRoutes } from './user-routes.ts';

export const admin = {
  name: 'admin',
  routes: adminUserRoutes,
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { createAdminArgs, createAdminCommand, ensureFirstSuperadmin } from './create-admin.ts';
export { reinstateUser, suspendUser } from './user-service.ts';
