// The Profile record of document 1 §2 and the body that creates or updates
// one. The record is the presenter: the router parses the Profile entity
// through it (pin_protected is the entity's derived getter; the PIN hash is
// not in the record, so it never leaves).
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { lineText, orNull, timestamp, uuid, withExample } from '../http/schemas.ts';
import { CONTENT_RATINGS, PROFILE_NAME_MAX } from './profile.entity.ts';
import { localeField } from './user-record.ts';

export const profileRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  avatar_preset_id: orNull(z.uuid()),
  is_primary: z.boolean(),
  pin_protected: z.boolean(),
  content_rating_limit: z.enum(CONTENT_RATINGS),
  language: orNull(z.string()),
  is_kids: z.boolean(),
  autoplay_next_episode: z.boolean(),
  created_at: timestamp(),
  updated_at: timestamp(),
});

/** A profile's single-record replies carry its version as ETag; PUT honours If-Match. */
export const profileResource = versioned(profileRecord);

/** A profile PIN: 4 to 6 digits (document 1 part 8). */
export const pinField = () => z.string().regex(/^\d{4,6}$/, 'Must be 4 to 6 digits');

/**
 * Create and update take the same body (document 1 §4.2). On update, fields
 * left out keep their stored values; `null` clears avatar_preset_id, language
 * and pin (removing the PIN).
 */
export const profileBody = withExample(z.strictObject({
  name: lineText(PROFILE_NAME_MAX),
  avatar_preset_id: uuid().nullable().optional(),
  pin: pinField().nullable().optional().describe('Input only, never returned. null removes the PIN (on update).'),
  content_rating_limit: z.enum(CONTENT_RATINGS).optional().describe('Default TV-MA'),
  language: localeField().nullable().optional().describe('BCP 47 language tag'),
  is_kids: z.boolean().optional().describe('Default false'),
  autoplay_next_episode: z.boolean().optional().describe('Default true'),
}), { name: 'Kids', content_rating_limit: 'TV-Y', language: 'en-GB', is_kids: true, autoplay_next_episode: false });
export type ProfileInput = z.output<typeof profileBody>;

export const verifyPinBody = z.strictObject({ pin: pinField() });
