// The User record of document 1 §2 as the API returns it.
import { z } from 'zod';
import type { User } from './user.entity.ts';

export const userRecord = z.object({
  id: z.uuid(),
  email: z.email(),
  email_verified: z.boolean(),
  display_name: z.string().nullable(),
  phone: z.string().nullable(),
  phone_verified: z.boolean(),
  locale: z.string().nullable(),
  timezone: z.string().nullable(),
  country_code: z.string().nullable(),
  preferred_language: z.string().nullable(),
  status: z.enum(['active', 'suspended', 'pending_verification', 'deleted']),
  roles: z.array(z.string()),
  mfa_enabled: z.boolean(),
  notification_preferences: z.object({ payment: z.boolean(), new_content: z.boolean(), account_security: z.boolean(), marketing: z.boolean() }),
  avatar_url: z.string().nullable(),
  terms_accepted_at: z.string().nullable(),
  last_login_at: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type UserRecord = z.infer<typeof userRecord>;

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

export function presentUser(user: User, roles: string[]): UserRecord {
  return {
    id: user.id,
    email: user.email,
    email_verified: user.email_verified,
    display_name: user.display_name ?? null,
    phone: user.phone ?? null,
    phone_verified: user.phone_verified,
    locale: user.locale ?? null,
    timezone: user.timezone ?? null,
    country_code: user.country_code ?? null,
    preferred_language: user.preferred_language ?? null,
    status: user.status,
    roles,
    mfa_enabled: user.mfa_enabled,
    notification_preferences: user.notification_preferences,
    avatar_url: user.avatar_url ?? null,
    terms_accepted_at: iso(user.terms_accepted_at),
    last_login_at: iso(user.last_login_at),
    created_at: user.created_at.toISOString(),
    updated_at: user.updated_at.toISOString(),
  };
}
