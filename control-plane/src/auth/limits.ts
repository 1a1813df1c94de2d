// Rate-limit budgets that more than one place spends or that a service spends
// itself: the TOTP guesses of an account are counted by the MFA routes
// (declared, keyed by the caller) and by password reset (spent in the
// service, since a reset has no caller yet); the e-mails forgot-password and
// resend-verification send per address are counted after the response, so
// their answer stays "200 always" (document 2) and tells nothing.
import type { RateLimitRule } from '../http/route.ts';

/** TOTP guesses: 5 per 5 minutes per account. */
export const TOTP_BUDGET = { name: 'totp:account', limit: 5, windowSeconds: 300 } as const;

/** The MFA routes' declaration of the TOTP budget (the caller is the account). */
export const totpLimit: RateLimitRule = { ...TOTP_BUDGET, by: 'caller' };

/** The store key of an account's TOTP budget: the key the router derives for `by: 'caller'`. */
export const totpBudgetKey = (userId: string) => `${TOTP_BUDGET.name}:user:${userId}`;

/** Reset links e-mailed per address: 5 an hour. */
export const FORGOT_PER_ACCOUNT = { name: 'forgot:account', limit: 5, windowSeconds: 3600 } as const;

/** Verification links e-mailed per address: 3 an hour (document 1 part 8). */
export const RESEND_PER_ACCOUNT = { name: 'resend:account', limit: 3, windowSeconds: 3600 } as const;
