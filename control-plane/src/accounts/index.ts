// The accounts capability: the User record (owned here; auth and
// administration sit above it), the subscriber's own account routes, the
// avatar (upload and the public image files) and the viewing profiles with
// their watchlist and progress data.
import { ApiError } from '../http/errors.ts';
import { avatarRoutes } from './avatar-routes.ts';
import { meRoutes } from './me-routes.ts';
import { profileRoutes } from './profile-routes.ts';
import { Profile, ProfileProgress, ProfileWatchlistItem } from './profile.entity.ts';
import type { AccountsServices } from './services.ts';
import { User } from './user.entity.ts';

export type { AccountsServices } from './services.ts';

/**
 * What accounts needs from capabilities above it, until they provide it:
 * one profile per account (billing raises it per plan), and no way to prove
 * a profile's PIN (auth provides profile tokens).
 */
const defaults: Pick<AccountsServices, 'profileLimit' | 'requireProfileToken'> = {
  profileLimit: async () => 1,
  requireProfileToken: async () => {
    throw new ApiError('PROFILE_TOKEN_REQUIRED', 'Profile tokens are not available');
  },
};

export const accounts = {
  name: 'accounts',
  entities: [User, Profile, ProfileWatchlistItem, ProfileProgress],
  routes: [...meRoutes, ...avatarRoutes, ...profileRoutes],
  async start() {
    return { services: { ...defaults } };
  },
};
