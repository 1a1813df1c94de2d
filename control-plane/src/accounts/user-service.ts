// The subscriber's own account (document 1 §4.1): read and update; and the
// creation of every account.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { ensurePrimaryProfile, primaryProfileInsertSql } from './profile-service.ts';
import type { UserRow } from './user-record.ts';
import { defaultNotificationPreferences, User, type NotificationPreferences } from './user.entity.ts';

/** The caller's own user, as an entity to change. */
export async function currentUser(rc: RequestContext): Promise<User> {
  if (!rc.actor || rc.actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  return rc.em.findOneOrFail(User, rc.actor.id);
}

/** The caller's own stored row, to read: the one authorization has just read, or a fresh read. */
export async function currentUserRow(rc: RequestContext): Promise<UserRow> {
  const actor = rc.actor;
  if (!actor || actor.type !== 'user') throw new ApiError('UNAUTHORIZED');
  if (actor.record?.id === actor.id) return actor.record as UserRow;
  const [row] = await rc.em.execute<UserRow[]>('select * from app_user where id = ?', [actor.id]);
  if (!row) throw new ApiError('NOT_FOUND', 'User not found');
  return row;
}

export interface UserUpdate {
  display_name?: string | null;
  phone?: string | null;
  locale?: string | null;
  timezone?: string | null;
  country_code?: string | null;
  preferred_language?: string | null;
  notification_preferences?: Partial<NotificationPreferences>;
}

/** Changes the given fields only; a new phone number is unverified until proven. */
export async function updateCurrentUser(rc: RequestContext, input: UserUpdate): Promise<User> {
  const user = await currentUser(rc);
  const { notification_preferences, ...fields } = input;
  if (fields.phone !== undefined && fields.phone !== user.phone) user.phone_verified = false;
  rc.em.assign(user, fields);
  if (notification_preferences) user.notification_preferences = { ...user.notification_preferences, ...notification_preferences };
  await rc.em.flush();
  return user;
}

/** What a new account is made of; accounts fills in the rest (preferences, unverified phone, no MFA, no avatar). */
export interface NewAccount {
  /** Already normalised (lower-cased) by the caller. */
  email: string;
  status: 'active' | 'pending_verification';
  email_verified: boolean;
  /** The password is one the mailbox's owner chose or confirmed (an administrator's own, given at the command line). */
  password_confirmed?: boolean;
  display_name?: string | null;
  phone?: string | null;
  locale?: string | null;
  country_code?: string | null;
  terms_accepted_at?: Date | null;
}

function accountColumns(input: NewAccount) {
  return {
    email: input.email, email_verified: input.email_verified, password_confirmed: input.password_confirmed ?? false,
    display_name: input.display_name ?? null, phone: input.phone ?? null, phone_verified: false, locale: input.locale ?? null,
    timezone: null, country_code: input.country_code ?? null, preferred_language: null, status: input.status, mfa_enabled: false,
    notification_preferences: { ...defaultNotificationPreferences }, avatar_url: null, terms_accepted_at: input.terms_accepted_at ?? null,
    last_login_at: null,
  };
}

/**
 * Creates a user with its primary profile in the caller's unit of work (both
 * flushed): every creator of a user (registration, admin:create, a CDN admin
 * user's invitation) comes through here or `insertAccountUnlessTaken`.
 */
export async function createAccount(em: EntityManager, input: NewAccount, passwordHash: string | null): Promise<User> {
  const user = em.create(User, { ...accountColumns(input), password_hash: passwordHash } as never);
  await em.flush();
  await ensurePrimaryProfile(em, user);
  return user;
}

/** The record of a new account as `insertAccountUnlessTaken` stores it (registration answers it whether stored or not). */
export function newAccount(input: NewAccount, now: Date): User {
  return Object.assign(new User(), { id: crypto.randomUUID(), ...accountColumns(input), created_at: now, updated_at: now, version: 1 });
}

/**
 * Inserts the account and its primary profile in one statement that does
 * nothing when the address is taken (also against a concurrent insert), plus
 * the caller's own step on the inserted row (`also`: a CTE body reading
 * `inserted`, e.g. a role grant), so a taken address costs the same work.
 * Returns the new account's id, or the id of the account holding the address.
 */
export async function insertAccountUnlessTaken(
  em: EntityManager,
  user: User,
  passwordHash: string,
  also: { sql: string; params: unknown[] },
): Promise<{ createdId: string | null; existingId: string | null }> {
  const row: Record<string, unknown> = {
    id: user.id, email: user.email, email_verified: user.email_verified, password_hash: passwordHash,
    display_name: user.display_name, phone: user.phone, phone_verified: user.phone_verified, locale: user.locale,
    timezone: user.timezone, country_code: user.country_code, preferred_language: user.preferred_language,
    status: user.status, mfa_enabled: user.mfa_enabled, notification_preferences: JSON.stringify(user.notification_preferences),
    avatar_url: user.avatar_url, terms_accepted_at: user.terms_accepted_at, last_login_at: user.last_login_at,
    created_at: user.created_at, updated_at: user.updated_at,
  };
  const columns = Object.keys(row);
  const values = columns.map((c) => (c === 'notification_preferences' ? '?::jsonb' : '?'));
  const primaryProfile = primaryProfileInsertSql('inserted', user);
  // The last select reads the snapshot from before the insert: it finds only an account that already held the address.
  const [result] = await em.execute<{ created_id: string | null; existing_id: string | null }[]>(
    `with inserted as (
       insert into app_user (${columns.join(', ')}) values (${values.join(', ')})
       on conflict (email) do nothing
       returning id
     ), caller_step as (
       ${also.sql}
     ), profiled as (
       ${primaryProfile.sql}
       returning user_id
     )
     select (select id from inserted) as created_id, (select id from app_user where email = ?) as existing_id`,
    [...Object.values(row), ...also.params, ...primaryProfile.params, user.email],
  );
  return { createdId: result?.created_id ?? null, existingId: result?.existing_id ?? null };
}
