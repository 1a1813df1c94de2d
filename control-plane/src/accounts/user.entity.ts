import { defineEntity, p } from '@mikro-orm/core';

export const USER_STATUSES = ['active', 'suspended', 'pending_verification', 'deleted'] as const;
export type UserStatus = (typeof USER_STATUSES)[number];

export interface NotificationPreferences {
  payment: boolean;
  new_content: boolean;
  account_security: boolean;
  marketing: boolean;
}

export const defaultNotificationPreferences: NotificationPreferences = { payment: true, new_content: true, account_security: true, marketing: false };

/**
 * The full-text document an admin's `q` searches (GET /v1/admin/users): the
 * display name, and the e-mail address as a whole, as its words and as its
 * domain, so grace.hopper@example.com is found by `grace`, `hopper`,
 * `example.com` and the full address. The `simple` configuration: names and
 * addresses are not a language to stem. One expression for the GIN index
 * (migration 0003) and the query, which must match it to use the index.
 */
export function userSearchDocument(alias?: string): string {
  const column = (name: string) => (alias ? `${alias}.${name}` : name);
  return `to_tsvector('simple'::regconfig, coalesce(${column('display_name')}, '') || ' ' || ${column('email')} || ' ' `
    + `|| regexp_replace(${column('email')}, '[^[:alnum:]]+', ' ', 'g') || ' ' || split_part(${column('email')}, '@', 2))`;
}

// Property names follow the API's User record (document 1 §2), so records map 1:1.
export const UserSchema = defineEntity({
  name: 'User',
  tableName: 'app_user',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    // Stored lower-cased; unique.
    email: p.string().length(254).unique('app_user_email_key'),
    email_verified: p.boolean().default(false),
    password_hash: p.string().length(255).nullable().hidden(),
    // The password is one the mailbox's owner chose or confirmed, not only whoever registered the address (migration 0048).
    password_confirmed: p.boolean().default(false).hidden(),
    display_name: p.string().length(100).nullable(),
    phone: p.string().length(20).nullable(),
    phone_verified: p.boolean().default(false),
    locale: p.string().length(35).nullable(),
    timezone: p.string().length(64).nullable(),
    country_code: p.string().length(2).nullable(),
    preferred_language: p.string().length(35).nullable(),
    status: p.enum(USER_STATUSES).default('pending_verification'),
    mfa_enabled: p.boolean().default(false),
    // TOTP secret encrypted with the secret box; the pending one waits for confirmation.
    totp_secret_encrypted: p.text().nullable().hidden(),
    totp_pending_secret_encrypted: p.text().nullable().hidden(),
    // Last accepted TOTP time step: a code is never accepted twice.
    totp_last_step: p.bigint('number').nullable().hidden(),
    recovery_codes_generated_at: p.datetime().nullable(),
    notification_preferences: p.json<NotificationPreferences>(),
    avatar_url: p.string().length(2048).nullable(),
    terms_accepted_at: p.datetime().nullable(),
    last_login_at: p.datetime().nullable(),
    suspended_reason: p.string().length(500).nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'app_user_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'app_user_status_idx', properties: ['status'] },
    { name: 'app_user_search_idx', expression: `create index app_user_search_idx on app_user using gin (${userSearchDocument()})` },
  ],
});

export class User extends UserSchema.class {}
UserSchema.setClass(User);
