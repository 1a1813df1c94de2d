// Viewing profiles of an account (document 1 §2 "Profile", §4.2), and the
// per-profile viewing data that goes with them: the watchlist and playback
// progress. No route writes those two yet (the catalogue and player come
// later); they exist so a profile's deletion takes its data with it (ON
// DELETE CASCADE from the profile).
import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.entity.ts';

export const CONTENT_RATINGS = ['G', 'PG', 'PG-13', 'R', 'NC-17', 'TV-Y', 'TV-G', 'TV-PG', 'TV-14', 'TV-MA'] as const;
export type ContentRating = (typeof CONTENT_RATINGS)[number];
export const DEFAULT_CONTENT_RATING: ContentRating = 'TV-MA';

/** Longest profile name (document 1 part 8). */
export const PROFILE_NAME_MAX = 50;

export const ProfileSchema = defineEntity({
  name: 'Profile',
  tableName: 'profile',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    name: p.string().length(PROFILE_NAME_MAX),
    avatar_preset_id: p.uuid().nullable(),
    // The account's own profile, created with it; never deleted while the account lives.
    is_primary: p.boolean().default(false),
    // HMAC-SHA256 (hex) of the PIN under a server-side key (profile-service.ts); null: no PIN.
    pin_hash: p.string().length(64).nullable().hidden(),
    content_rating_limit: p.enum(CONTENT_RATINGS).default(DEFAULT_CONTENT_RATING),
    language: p.string().length(35).nullable(),
    is_kids: p.boolean().default(false),
    autoplay_next_episode: p.boolean().default(true),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'profile_user_idx', properties: ['user', 'created_at'] },
    // One primary profile per account, held by the database.
    { name: 'profile_one_primary_per_user', expression: 'create unique index "profile_one_primary_per_user" on "profile" ("user_id") where is_primary' },
  ],
});

export class Profile extends ProfileSchema.class {
  /** Read-only in the API: whether a PIN guards the profile (the PIN itself is never shown). */
  get pin_protected(): boolean {
    return this.pin_hash !== null && this.pin_hash !== undefined;
  }
}
ProfileSchema.setClass(Profile);

// Content ids come from the catalogue, which is not part of this service: an
// opaque string up to 100 characters rather than a uuid of ours.
export const CONTENT_ID_MAX = 100;

export const ProfileWatchlistItemSchema = defineEntity({
  name: 'ProfileWatchlistItem',
  tableName: 'profile_watchlist_item',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    profile: () => p.manyToOne(Profile).deleteRule('cascade'),
    content_id: p.string().length(CONTENT_ID_MAX),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  uniques: [{ name: 'profile_watchlist_item_profile_content_key', properties: ['profile', 'content_id'] }],
  indexes: [{ name: 'profile_watchlist_item_profile_idx', properties: ['profile', 'created_at'] }],
});
export class ProfileWatchlistItem extends ProfileWatchlistItemSchema.class {}
ProfileWatchlistItemSchema.setClass(ProfileWatchlistItem);

export const ProfileProgressSchema = defineEntity({
  name: 'ProfileProgress',
  tableName: 'profile_progress',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    profile: () => p.manyToOne(Profile).deleteRule('cascade'),
    // The title or episode played; for an episode, its series (for "continue watching" by series).
    content_id: p.string().length(CONTENT_ID_MAX),
    series_id: p.string().length(CONTENT_ID_MAX).nullable(),
    position_seconds: p.integer(),
    duration_seconds: p.integer().nullable(),
    completed: p.boolean().default(false),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  uniques: [{ name: 'profile_progress_profile_content_key', properties: ['profile', 'content_id'] }],
  indexes: [{ name: 'profile_progress_profile_updated_idx', properties: ['profile', 'updated_at'] }],
});
export class ProfileProgress extends ProfileProgressSchema.class {}
ProfileProgressSchema.setClass(ProfileProgress);
