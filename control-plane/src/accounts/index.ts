// The accounts capability: the User record (owned here; auth and
// administration sit above it), the subscriber's own account routes, the
// avatar (upload and the public image files), the viewing profiles with
// their watchlist and progress data, and the personal-data export and
// account deletion (GDPR) with their background jobs.
import type { CoreServices } from '../core/services.ts';
import { ApiError } from '../http/errors.ts';
import { deliver } from '../mail/deliver.ts';
import { avatarRoutes } from './avatar-routes.ts';
import { DataExport } from './data-export.entity.ts';
import { dataExportRoutes } from './data-export-routes.ts';
import { dataExportJob } from './data-export-service.ts';
import { DeletionRequest } from './deletion-request.entity.ts';
import { deletionRoutes } from './deletion-routes.ts';
import { erasureJob } from './deletion-service.ts';
import { meRoutes } from './me-routes.ts';
import { accountsPersonalData } from './personal-data.ts';
import { personalDataHousekeepingJob } from './personal-data-housekeeping.ts';
import { profileRoutes } from './profile-routes.ts';
import { Profile, ProfileProgress, ProfileWatchlistItem } from './profile.entity.ts';
import type { AccountsServices } from './services.ts';
import { User } from './user.entity.ts';

export type { AccountsServices } from './services.ts';

/**
 * What accounts needs from capabilities above it, until they provide it: one
 * profile per account (billing raises it per plan), no way to prove a
 * profile's PIN, a password or a second factor (auth), no subscriptions to end (billing), and
 * notices sent as e-mail only (notifications adds the in-app record and the
 * user's preferences).
 */
function defaults(core: CoreServices): Pick<AccountsServices, 'profileLimit' | 'requireProfileToken' | 'checkPassword' | 'requireStepUp' | 'endSubscriptionsForDeletion' | 'notifyUser'> {
  return {
    profileLimit: async () => 1,
    requireProfileToken: async () => {
      throw new ApiError('PROFILE_TOKEN_REQUIRED', 'Profile tokens are not available');
    },
    checkPassword: async () => false,
    requireStepUp: async () => {
      throw new ApiError('STEP_UP_REQUIRED', 'Step-up tokens are not available');
    },
    endSubscriptionsForDeletion: async () => 0,
    notifyUser: async (rc, notice) => {
      const user = await rc.em.findOne(User, notice.userId);
      await rc.em.flush();
      if (!user || user.status === 'deleted' || !notice.email) return;
      const to = user.email;
      const email = notice.email;
      core.deferred.defer(`account-notice:${notice.type}`, () => deliver(core, to, email), rc.log);
    },
  };
}

export const accounts = {
  name: 'accounts',
  entities: [User, Profile, ProfileWatchlistItem, ProfileProgress, DataExport, DeletionRequest],
  routes: [...meRoutes, ...deletionRoutes, ...avatarRoutes, ...profileRoutes, ...dataExportRoutes],
  jobs: [dataExportJob, erasureJob, personalDataHousekeepingJob],
  personalData: accountsPersonalData,
  async start(core: CoreServices) {
    return { services: defaults(core) };
  },
};

// What the other capabilities use of this one: they import it from here, never from the files.
export { pendingDeletionSql } from './deletion-request.entity.ts';
export { verifyPinBody } from './profile-record.ts';
export { currentPinFingerprint, ensurePrimaryProfile, PIN_BUDGET, pinBudgetKey, verifyProfilePin } from './profile-service.ts';
export { type AccountNotice, type ProfileLimit } from './services.ts';
export { countryCodeField, localeField, phoneField, userResource, withRoles } from './user-record.ts';
export { createAccount, insertAccountUnlessTaken, newAccount, type NewAccount } from './user-service.ts';
export { defaultNotificationPreferences, User, USER_STATUSES, userSearchDocument } from './user.entity.ts';
