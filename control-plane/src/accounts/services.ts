// The services the accounts capability needs beyond the platform's. Two of
// them are known only to capabilities above accounts, which provide them from
// their start hooks (dependency inversion: accounts never imports them); the
// accounts module supplies defaults for when no provider is listed. The
// personal-data providers are gathered by the composition root.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreServices } from '../core/services.ts';
import type { PersonalDataProvider } from '../core/personal-data.ts';
import type { RequestContext } from '../core/request-context.ts';
import { routesFor } from '../http/route.ts';
import type { JobServices } from '../jobs/index.ts';

/** The most profiles a user may hold (billing: the highest max_profiles of the user's live subscriptions; 1 without any). */
export type ProfileLimit = (em: EntityManager, userId: string) => Promise<number>;

/**
 * Refuses (403 PROFILE_TOKEN_REQUIRED) a PIN-protected profile unless the
 * request carries a valid profile token for it, obtained with its current PIN
 * in the caller's session (auth: the X-Profile-Token header).
 */
export type ProfileTokenCheck = (rc: RequestContext, profileId: string) => Promise<void>;

export interface AccountsServices extends CoreServices, JobServices {
  profileLimit: ProfileLimit;
  requireProfileToken: ProfileTokenCheck;
  /** Every holder of personal data (gathered by the composition root from the capabilities and the framework). */
  personalData: readonly PersonalDataProvider<any>[];
}

export const defineAccountsRoute = routesFor<AccountsServices>();
