// Viewing profiles (document 1 §4.2): list, create within the plan's limit,
// read, update, delete (not the primary), and the PIN check behind verify-pin.
// Owners act on their own profiles; a caller whose permission matched
// globally (an administrator) may act on anyone's (§4.0.6). Another user's
// profile is answered 404, never changed.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/audit.ts';
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, notFound } from '../http/errors.ts';
import { assertBudgetLeft, consumeRateLimit } from '../http/rate-limit.ts';
import type { ProfileInput } from './profile-record.ts';
import { DEFAULT_CONTENT_RATING, Profile, PROFILE_NAME_MAX } from './profile.entity.ts';
import type { AccountsServices } from './services.ts';

/** Wrong PINs a profile tolerates per window before verify-pin answers 429 (a right PIN spends nothing). */
export const PIN_BUDGET = { name: 'profile-pin', limit: 5, windowSeconds: 15 * 60 } as const;
/** The store key of a profile's wrong-PIN budget. */
export const pinBudgetKey = (profileId: string) => `${PIN_BUDGET.name}:profile:${profileId}`;

/** Key purpose of the PIN hashes (derived from the secrets key). */
const PIN_KEY_PURPOSE = 'profile-pin';

/**
 * The name of an account's primary profile: its display name, else the local
 * part of its e-mail address, cut to 50 characters (by code point). Migration
 * 0006 names the profiles of earlier accounts the same way.
 */
export function primaryProfileName(user: { display_name?: string | null; email: string }): string {
  const at = user.email.lastIndexOf('@');
  const source = user.display_name?.trim() || (at > 0 ? user.email.slice(0, at) : user.email);
  return Array.from(source).slice(0, PROFILE_NAME_MAX).join('').trim() || 'Profile';
}

/**
 * The statement part that inserts the primary profile of every user a CTE
 * named `source` returns (its rows need `id`), for account creation that runs
 * as one statement (registration). The other columns take their defaults.
 */
export function primaryProfileInsertSql(source: string, user: { display_name?: string | null; email: string; created_at: Date }): { sql: string; params: unknown[] } {
  if (!/^[a-z_]+$/.test(source)) throw new Error(`bad CTE name ${source}`);
  return {
    sql: `insert into profile (id, user_id, name, is_primary, created_at, updated_at) select gen_random_uuid(), id, ?, true, ?, ? from ${source}`,
    params: [primaryProfileName(user), user.created_at, user.created_at],
  };
}

/** Creates the user's primary profile unless it has one (account creation outside registration: admin:create). */
export async function ensurePrimaryProfile(em: EntityManager, user: { id: string; display_name?: string | null; email: string }): Promise<void> {
  const now = new Date();
  await em.execute(
    `insert into profile (id, user_id, name, is_primary, created_at, updated_at) values (?, ?, ?, true, ?, ?)
     on conflict (user_id) where is_primary do nothing`,
    [crypto.randomUUID(), user.id, primaryProfileName(user), now, now],
  );
}

function callerId(rc: RequestContext): string {
  if (!rc.actor || rc.actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  return rc.actor.id;
}

function ownerIdOf(profile: Profile): string {
  return (profile.user as unknown as { id: string }).id;
}

/** The caller's profiles: the primary first, then in creation order. */
export async function listProfiles(rc: RequestContext): Promise<Profile[]> {
  return rc.em.find(Profile, { user: callerId(rc) }, { orderBy: { is_primary: 'desc', created_at: 'asc', id: 'asc' } });
}

/** One of the caller's profiles, or anyone's for a global administrator; 404 otherwise. */
export async function findProfile(rc: RequestContext, profileId: string, em: EntityManager = rc.em): Promise<Profile> {
  const caller = callerId(rc);
  const profile = await em.findOne(Profile, profileId);
  if (!profile || (ownerIdOf(profile) !== caller && rc.access !== 'global')) throw notFound('Profile');
  return profile;
}

function pinHash(app: CoreServices, profileId: string, pin: string): string {
  // Keyed and bound to the profile: equal PINs of two profiles do not show as equal hashes,
  // and a copy of the table alone does not yield the PINs.
  return createHmac('sha256', app.deriveKey(PIN_KEY_PURPOSE)).update(`${profileId}\u0000${pin}`).digest('hex');
}

/**
 * A short digest of a profile's current PIN hash, carried by the profile
 * tokens issued for it: a token proves the PIN the profile has now, so
 * changing or removing the PIN voids the tokens issued before. (A digest of
 * a keyed hash: it tells the token's holder nothing about the PIN.)
 */
export function pinFingerprint(storedHash: string): string {
  return createHash('sha256').update(storedHash).digest('base64url').slice(0, 22);
}

/** The fingerprint of a profile's current PIN; null when it has none (or does not exist). */
export async function currentPinFingerprint(em: EntityManager, profileId: string): Promise<string | null> {
  const profile = await em.findOne(Profile, profileId);
  return profile?.pin_hash ? pinFingerprint(profile.pin_hash) : null;
}

function pinMatches(app: CoreServices, profileId: string, pin: string, stored: string): boolean {
  const presented = Buffer.from(pinHash(app, profileId, pin), 'hex');
  const expected = Buffer.from(stored, 'hex');
  return presented.length === expected.length && timingSafeEqual(presented, expected);
}

/**
 * Creates a profile for the caller, within the plan's limit. The caller's
 * user row is locked for the count and insert, so concurrent creates of one
 * account are serialised and cannot pass the limit together.
 */
export async function createProfile(app: AccountsServices, rc: RequestContext, input: ProfileInput): Promise<Profile> {
  const userId = callerId(rc);
  return rc.em.transactional(async (em) => {
    await em.execute('select id from app_user where id = ? for no key update', [userId]);
    const limit = await app.profileLimit(em, userId);
    const held = await em.count(Profile, { user: userId });
    if (held >= limit) {
      throw new ApiError('PROFILE_LIMIT_REACHED', `Your plan allows ${limit} profile${limit === 1 ? '' : 's'}; delete one or change plan to add another`);
    }
    const id = crypto.randomUUID();
    const profile = em.create(Profile, {
      id,
      user: userId,
      name: input.name,
      avatar_preset_id: input.avatar_preset_id ?? null,
      is_primary: false,
      pin_hash: input.pin ? pinHash(app, id, input.pin) : null,
      content_rating_limit: input.content_rating_limit ?? DEFAULT_CONTENT_RATING,
      language: input.language ?? null,
      is_kids: input.is_kids ?? false,
      autoplay_next_episode: input.autoplay_next_episode ?? true,
    } as never);
    await em.flush();
    return profile;
  });
}

/**
 * A PIN-protected profile is changed or deleted only with proof of its PIN
 * (a profile token of the caller's session), so those who share the
 * account's login cannot lift or remove the lock. An administrator acting
 * on another user's profile is exempt (support clearing a forgotten PIN).
 */
async function assertUnlocked(app: AccountsServices, rc: RequestContext, profile: Profile): Promise<void> {
  if (!profile.pin_protected) return;
  if (ownerIdOf(profile) !== callerId(rc) && rc.access === 'global') return;
  await app.requireProfileToken(rc, profile.id);
}

/** Someone else's profile changed by an administrator is audit-logged with the acting admin. */
function auditIfOnBehalf(rc: RequestContext, profile: Profile, action: string, metadata: Record<string, unknown> = {}): void {
  const owner = ownerIdOf(profile);
  if (owner !== callerId(rc)) recordAudit(rc, { action, resource_type: 'profile', resource_id: profile.id, metadata: { user_id: owner, ...metadata } });
}

/**
 * Takes the create body: fields left out keep their stored values (a rename
 * must not reset a kids profile's rating limit); null clears the avatar, the
 * language or the PIN.
 */
export async function updateProfile(app: AccountsServices, rc: RequestContext, profileId: string, input: ProfileInput): Promise<Profile> {
  const profile = await findProfile(rc, profileId);
  await assertUnlocked(app, rc, profile);
  profile.name = input.name;
  if (input.avatar_preset_id !== undefined) profile.avatar_preset_id = input.avatar_preset_id;
  if (input.pin !== undefined) profile.pin_hash = input.pin === null ? null : pinHash(app, profile.id, input.pin);
  if (input.content_rating_limit !== undefined) profile.content_rating_limit = input.content_rating_limit;
  if (input.language !== undefined) profile.language = input.language;
  if (input.is_kids !== undefined) profile.is_kids = input.is_kids;
  if (input.autoplay_next_episode !== undefined) profile.autoplay_next_episode = input.autoplay_next_episode;
  auditIfOnBehalf(rc, profile, 'profile.updated', { fields: Object.keys(input) });
  await rc.em.flush();
  return profile;
}

/** Deletes a profile with its watchlist and progress (foreign keys cascade); never the primary. */
export async function deleteProfile(app: AccountsServices, rc: RequestContext, profileId: string): Promise<void> {
  const profile = await findProfile(rc, profileId);
  if (profile.is_primary) throw new ApiError('PRIMARY_PROFILE', 'The primary profile cannot be deleted');
  await assertUnlocked(app, rc, profile);
  auditIfOnBehalf(rc, profile, 'profile.deleted', { name: profile.name });
  rc.em.remove(profile);
  await rc.em.flush();
}

/**
 * Checks a PIN of one of the caller's own profiles (an administrator gets no
 * profile tokens for others' profiles). Wrong PINs spend the profile's
 * budget (5 per 15 minutes, then 429 even for the right PIN until the window
 * ends); a right one spends nothing. The profile's row is locked from the
 * budget check to the spend, so parallel guesses are taken one at a time and
 * cannot all pass the check. Wrong PIN: 400 on `pin` (401 would tell clients
 * their access token failed); a profile without a PIN: 409.
 */
export async function verifyProfilePin(app: CoreServices, rc: RequestContext, profileId: string, pin: string): Promise<{ id: string; pinFingerprint: string }> {
  const userId = callerId(rc);
  return rc.em.transactional(async (em) => {
    const [row] = await em.execute<{ id: string; user_id: string; pin_hash: string | null }[]>(
      'select id, user_id, pin_hash from profile where id = ? for no key update', [profileId]);
    if (!row || row.user_id !== userId) throw notFound('Profile');
    if (!row.pin_hash) throw new ApiError('CONFLICT', 'This profile has no PIN; it needs no profile token');
    const key = pinBudgetKey(profileId);
    await assertBudgetLeft(app.store, key, PIN_BUDGET.limit, PIN_BUDGET.windowSeconds);
    if (!pinMatches(app, profileId, pin, row.pin_hash)) {
      await consumeRateLimit(app.store, key, PIN_BUDGET.limit, PIN_BUDGET.windowSeconds);
      throw new ApiError('VALIDATION_ERROR', 'Incorrect PIN', { errors: [{ field: 'pin', message: 'Incorrect PIN' }] });
    }
    return { id: row.id, pinFingerprint: pinFingerprint(row.pin_hash) };
  });
}
