// The services the accounts capability needs beyond the platform's. Most of
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
import type { EmailContent } from '../mail/templates.ts';

/** The most profiles a user may hold (billing: the highest max_profiles of the user's live subscriptions; 1 without any). */
export type ProfileLimit = (em: EntityManager, userId: string) => Promise<number>;

/**
 * Refuses (403 PROFILE_TOKEN_REQUIRED) a PIN-protected profile unless the
 * request carries a valid profile token for it, obtained with its current PIN
 * in the caller's session (auth: the X-Profile-Token header).
 */
export type ProfileTokenCheck = (rc: RequestContext, profileId: string) => Promise<void>;

/** Whether `password` is the user's current password (auth: argon2 verification). */
export type PasswordCheck = (rc: RequestContext, userId: string, password: string) => Promise<boolean>;

/** Refuses (403 STEP_UP_REQUIRED) unless `token` is a step-up token the caller's session obtained within its lifetime (auth). */
export type StepUpCheck = (rc: RequestContext, token: string) => Promise<void>;

/**
 * Ends the user's live subscriptions at once, without refund, because the
 * account is to be deleted (billing); in the caller's unit of work. Returns
 * how many were ended.
 */
export type SubscriptionTermination = (rc: RequestContext, userId: string) => Promise<number>;

/** What accounts tells users about (notification types it sends; notifications lists them with their category). */
export interface AccountNotice {
  userId: string;
  type: 'data_export_ready' | 'account_deletion_requested';
  priority?: 'low' | 'normal' | 'high';
  title: string;
  body: string;
  /** The e-mail to send (notifications sends it as the category calls for). */
  email?: EmailContent;
  expiresAt?: Date;
}

/**
 * Records an in-app notification and e-mails it, honouring the user's
 * preferences (notifications: notify()), in the caller's unit of work, which
 * it flushes.
 */
export type UserNotifier = (rc: RequestContext, notice: AccountNotice) => Promise<void>;

export interface AccountsServices extends CoreServices, JobServices {
  profileLimit: ProfileLimit;
  requireProfileToken: ProfileTokenCheck;
  checkPassword: PasswordCheck;
  requireStepUp: StepUpCheck;
  endSubscriptionsForDeletion: SubscriptionTermination;
  notifyUser: UserNotifier;
  /** Every holder of personal data (gathered by the composition root from the capabilities and the framework). */
  personalData: readonly PersonalDataProvider<any>[];
}

export const defineAccountsRoute = routesFor<AccountsServices>();
