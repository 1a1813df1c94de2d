// The accounts capability: the User record (owned here; auth and
// administration sit above it), the subscriber's own account routes and
// the avatar (upload and the public image files).
import { avatarRoutes } from './avatar-routes.ts';
import { meRoutes } from './me-routes.ts';
import { User } from './user.entity.ts';

export const accounts = {
  name: 'accounts',
  entities: [User],
  routes: [...meRoutes, ...avatarRoutes],
};
