// The User record of document 1 §2 and its fields' input rules. The record
// schema is also the presenter: the router parses the entity (plus its roles)
// through it, so the response shape is declared once.
import isoCountries from 'i18n-iso-countries';
import { z } from 'zod';
import { orNull, timestamp, timestampOrNull } from '../http/schemas.ts';
import { versioned } from '../http/route.ts';
import { USER_STATUSES, type User } from './user.entity.ts';

export const phoneField = () => z.string().max(20).regex(/^\+[1-9]\d{1,14}$/, 'Must be an E.164 number such as +14155550123');
// The officially assigned ISO 3166-1 alpha-2 codes, from a maintained list (i18n-iso-countries),
// plus XK (Kosovo), which the list carries as most systems and GeoIP databases do.
const ISO_3166_ALPHA_2 = new Set(Object.keys(isoCountries.getAlpha2Codes()));
const notACountry = 'Must be an ISO 3166-1 alpha-2 country code such as FR';
export const countryCodeField = () => z.string()
  .regex(/^[A-Za-z]{2}$/, notACountry)
  .transform((v) => v.toUpperCase())
  .refine((v) => ISO_3166_ALPHA_2.has(v), notACountry);
export const localeField = () => z.string().max(35).regex(/^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/, 'Must be a BCP 47 language tag such as en-GB');
export const timezoneField = () => z.string().max(64).refine((tz) => {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}, 'Must be an IANA time-zone name such as Europe/Paris');

export const userRecord = z.object({
  id: z.uuid(),
  email: z.string(),
  email_verified: z.boolean(),
  display_name: orNull(z.string()),
  phone: orNull(z.string()),
  phone_verified: z.boolean(),
  locale: orNull(z.string()),
  timezone: orNull(z.string()),
  country_code: orNull(z.string()),
  preferred_language: orNull(z.string()),
  status: z.enum(USER_STATUSES),
  roles: z.array(z.string()),
  mfa_enabled: z.boolean(),
  notification_preferences: z.object({ payment: z.boolean(), new_content: z.boolean(), account_security: z.boolean(), marketing: z.boolean() }),
  avatar_url: orNull(z.string()),
  terms_accepted_at: timestampOrNull(),
  last_login_at: timestampOrNull(),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export type UserRecord = z.output<typeof userRecord>;

/** A user's single-record replies carry its version as ETag, and updates check If-Match. */
export const userResource = versioned(userRecord);

/** A user as stored: an entity, or a row as the database returns it (timestamps may come as strings). */
export type UserRow = Omit<z.input<typeof userRecord>, 'roles'> & { version: number };

/** The value a route hands over for a user record: the user (entity or row) and the roles the guard or a query found. */
export function withRoles<U extends User | UserRow>(user: U, roles: string[]): U & { roles: string[] } {
  // A copy, not a prototype link: objects of one shape keep the record's parse fast.
  return { ...user, roles };
}
