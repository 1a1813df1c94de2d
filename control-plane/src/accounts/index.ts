// The accounts capability: the User record (owned here; auth and
// administration sit above it), the subscriber's own account routes and the
// viewing profiles with their watchlist and progress data.
import { meRoutes } from './me-routes.ts';
import { Profile, ProfileProgress, ProfileWatchlistItem } from './profile.entity.ts';
import { User } from './user.entity.ts';

export const accounts = {
  name: 'accounts',
  entities: [User, Profile, ProfileWatchlistItem, ProfileProgress],
  routes: meRoutes,
};
