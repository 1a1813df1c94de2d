// The accounts capability: the User record (owned here; auth and
// administration sit above it) and the subscriber's own account routes.
import { meRoutes } from './me-routes.ts';
import { User } from './user.entity.ts';

export const accounts = {
  name: 'accounts',
  entities: [User],
  routes: meRoutes,
};
