// Helpers for the auth contract and flow tests: accounts (through the API or
// straight into the database), the verification link from the outbox, refresh
// cookies, TOTP codes and row counts for "nothing stored" checks.
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { generate } from 'otplib';
import { ensurePrimaryProfile } from '../../control-plane/src/accounts/profile-service.ts';
import { User, defaultNotificationPreferences } from '../../control-plane/src/accounts/user.entity.ts';
import { assignRole } from '../../control-plane/src/auth/permissions/permission-service.ts';
import { hashPassword } from '../../control-plane/src/auth/primitives/password.ts';
import { findLatestMessage, readOutbox, waitForMessage, type OutboxEntry } from '../../control-plane/src/mail/outbox.ts';
import type { TestControlPlane, TestResponse } from './control-plane.ts';

/** Meets the policy: 10+ characters, upper, lower, digit, special. */
export const PASSWORD = 'Correct-Horse-42';
export const OTHER_PASSWORD = 'Battery-Staple-77';

let sequence = 0;
/** A fresh address per call (unique across files and processes). */
export function uniqueEmail(tag = 'user'): string {
  sequence += 1;
  return `${tag}-${process.pid}-${sequence}-${randomBytes(3).toString('hex')}@example.com`;
}

export const bearer = (accessToken: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${accessToken}`, ...extra });

/** Who sends a request: a logged-in account, a raw bearer value (e.g. a `cdn_...` API token), or nobody. */
export type Caller = { accessToken: string } | string | null;

/** `send(who, method, path, json?, headers?)` against one control plane, with the caller's Authorization. */
export const sender = (cp: TestControlPlane) => (who: Caller, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: { ...(who === null ? {} : bearer(typeof who === 'string' ? who : who.accessToken)), ...headers }, json });

// ---- cookies --------------------------------------------------------------

/** The Set-Cookie lines of a response. */
export function setCookies(res: TestResponse): string[] {
  return res.headers.getSetCookie();
}

/** The refresh_token Set-Cookie line, if any. */
export function refreshCookieLine(res: TestResponse): string | undefined {
  return setCookies(res).find((line) => line.startsWith('refresh_token='));
}

/** The refresh token value set by the response (undefined when none or cleared). */
export function refreshTokenFrom(res: TestResponse): string | undefined {
  const line = refreshCookieLine(res);
  const value = line?.split(';')[0]!.slice('refresh_token='.length);
  return value || undefined;
}

/** Cookie attributes as a lower-cased name → value map (flags map to ''). */
export function cookieAttributes(line: string): Map<string, string> {
  const attributes = new Map<string, string>();
  for (const part of line.split(';').slice(1)) {
    const [name, ...rest] = part.trim().split('=');
    attributes.set(name!.toLowerCase(), rest.join('='));
  }
  return attributes;
}

export const cookieHeader = (refreshToken: string) => ({ cookie: `refresh_token=${refreshToken}` });

/** The device_cookie Set-Cookie line of a response, if any. */
export function deviceCookieLine(res: TestResponse): string | undefined {
  return setCookies(res).find((line) => line.startsWith('device_cookie='));
}

/** The device cookie value set by a (login) response. */
export function deviceCookieFrom(res: TestResponse): string | undefined {
  return deviceCookieLine(res)?.split(';')[0]!.slice('device_cookie='.length) || undefined;
}

export const deviceCookieHeader = (value: string) => ({ cookie: `device_cookie=${value}` });

// ---- outbox ---------------------------------------------------------------

export const outboxDir = (cp: TestControlPlane) => path.join(cp.config.dataDir, 'outbox');

/**
 * Waits until the work that requests handed off (e-mail sent after the
 * response) has finished: after it, the outbox holds every message the
 * requests made so far will ever send, so "nothing was sent" can be asserted.
 */
export async function settled(cp: TestControlPlane): Promise<void> {
  await cp.app.deferred.idle();
}

export async function messagesTo(cp: TestControlPlane, to: string): Promise<OutboxEntry[]> {
  await settled(cp);
  return (await readOutbox(outboxDir(cp))).filter((m) => m.to.toLowerCase() === to.toLowerCase());
}

export const VERIFY_SUBJECT = /^Confirm your e-mail address/;
export const RESET_SUBJECT = /^Reset your .* password$/;
export const SUSPENDED_SUBJECT = /account has been suspended$/;
export const REGISTRATION_NOTICE_SUBJECT = /^Someone tried to create/;
export const CONFIRMED_SUBJECT = /^Your e-mail address for .* is confirmed$/;

/** The `token` query parameter of the first link of the newest matching message. */
export async function tokenFromLatest(cp: TestControlPlane, to: string, subject: RegExp): Promise<string> {
  await settled(cp); // else an older message could be taken for the newest
  const message = await waitForMessage(outboxDir(cp), { to, subject });
  const link = message.links.find((l) => new URL(l).searchParams.has('token'));
  if (!link) throw new Error(`no link with a token in "${message.subject}" to ${to}`);
  return new URL(link).searchParams.get('token')!;
}

export async function latestMessage(cp: TestControlPlane, to: string, subject?: RegExp) {
  await settled(cp);
  return findLatestMessage(outboxDir(cp), { to, subject });
}

// ---- accounts through the API ------------------------------------------------

export interface RegisterOptions {
  email?: string;
  password?: string;
  body?: Record<string, unknown>;
  headers?: Record<string, string>;
}

export async function register(cp: TestControlPlane, options: RegisterOptions = {}) {
  const email = options.email ?? uniqueEmail();
  const password = options.password ?? PASSWORD;
  const res = await cp.request('POST', '/v1/auth/register', { json: { email, password, accept_terms: true, ...options.body }, headers: options.headers });
  if (res.status !== 201) throw new Error(`register ${email}: ${res.status} ${res.text}`);
  return { email, password, id: res.body.data.id as string, res };
}

/** Follows the verification link of the newest verification e-mail, showing the password chosen at registration (so it is kept). */
export async function verifyEmail(cp: TestControlPlane, email: string, password = PASSWORD): Promise<TestResponse> {
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const res = await cp.request('POST', '/v1/auth/email/verify', { json: { token, password } });
  if (res.status !== 200) throw new Error(`verify ${email}: ${res.status} ${res.text}`);
  return res;
}

export interface LoggedIn {
  accessToken: string;
  refreshToken: string;
  res: TestResponse;
}

export async function login(cp: TestControlPlane, email: string, password = PASSWORD, extra: Record<string, unknown> = {}, headers?: Record<string, string>): Promise<LoggedIn> {
  const res = await cp.request('POST', '/v1/auth/login', { json: { email, password, ...extra }, headers });
  if (res.status !== 200) throw new Error(`login ${email}: ${res.status} ${res.text}`);
  return { accessToken: res.body.data.access_token, refreshToken: refreshTokenFrom(res)!, res };
}

export interface TestAccount extends LoggedIn {
  id: string;
  email: string;
  password: string;
}

/** register → verify through the e-mailed link → login. */
export async function registerVerifiedUser(cp: TestControlPlane, options: RegisterOptions = {}): Promise<TestAccount> {
  const { email, password } = await register(cp, options);
  const verified = await verifyEmail(cp, email, password);
  const session = await login(cp, email, password);
  return { id: verified.body.data.id, email, password, ...session };
}

// ---- accounts straight into the database -----------------------------------

let passwordHash: Promise<string> | undefined;
/** One argon2 hash of PASSWORD per process: direct accounts cost no hashing. */
const hashOfDefaultPassword = () => (passwordHash ??= hashPassword(PASSWORD));

export interface DirectUserOptions {
  email?: string;
  roles?: string[];
  status?: 'active' | 'suspended' | 'pending_verification';
  display_name?: string;
  country_code?: string;
}

/** Inserts an account with its primary profile and assigns roles through the permission service (no API, no e-mail). */
export async function createUserDirect(cp: TestControlPlane, options: DirectUserOptions = {}): Promise<{ id: string; email: string; password: string }> {
  const em = cp.database.db.orm.em.fork();
  const email = options.email ?? uniqueEmail('direct');
  const status = options.status ?? 'active';
  const user = em.create(User, {
    email,
    password_hash: await hashOfDefaultPassword(),
    display_name: options.display_name ?? null,
    country_code: options.country_code ?? null,
    status,
    email_verified: status !== 'pending_verification',
    password_confirmed: status !== 'pending_verification',
    terms_accepted_at: new Date(),
    notification_preferences: { ...defaultNotificationPreferences },
  } as never);
  await em.flush();
  await ensurePrimaryProfile(em, user);
  for (const role of options.roles ?? ['subscriber']) await assignRole(em, user.id, role);
  return { id: user.id, email, password: PASSWORD };
}

/** A logged-in account with the given roles, created through the database. */
export async function createLoggedInUser(cp: TestControlPlane, options: DirectUserOptions = {}): Promise<TestAccount> {
  const user = await createUserDirect(cp, options);
  return { ...user, ...(await login(cp, user.email, user.password)) };
}

export const createAdmin = (cp: TestControlPlane, options: DirectUserOptions = {}) =>
  createLoggedInUser(cp, { ...options, roles: ['admin', 'subscriber', ...(options.roles ?? [])] });
export const createSuperadmin = (cp: TestControlPlane, options: DirectUserOptions = {}) =>
  createLoggedInUser(cp, { ...options, roles: ['superadmin', 'subscriber', ...(options.roles ?? [])] });

// ---- TOTP -----------------------------------------------------------------

const PERIOD = 30;

/**
 * The code of the time step `offset` steps from now (the server accepts -1, 0
 * and +1, each step once). Waits out the last second of a step so the code
 * does not fall out of the window between generation and verification.
 */
export async function totpCode(secret: string, offset = 0): Promise<string> {
  const intoStep = (Date.now() / 1000) % PERIOD;
  if (intoStep > PERIOD - 1.5) await sleep((PERIOD - intoStep) * 1000 + 50);
  const epoch = Math.floor(Date.now() / 1000) + offset * PERIOD;
  return generate({ secret, epoch, period: PERIOD, digits: 6, algorithm: 'sha1' });
}

/** setup → verify with the previous step's code: MFA on; returns the secret, the recovery codes and a step-up token. */
export async function enableMfa(cp: TestControlPlane, account: { accessToken: string }) {
  const setup = await cp.request('POST', '/v1/me/auth/mfa/setup', { headers: bearer(account.accessToken) });
  if (setup.status !== 200) throw new Error(`setup: ${setup.status} ${setup.text}`);
  const secret: string = setup.body.data.secret;
  const verify = await cp.request('POST', '/v1/me/auth/mfa/verify', { headers: bearer(account.accessToken), json: { totp_code: await totpCode(secret, -1) } });
  if (verify.status !== 200) throw new Error(`verify: ${verify.status} ${verify.text}`);
  return { secret, codes: verify.body.recovery_codes.codes as string[], stepUp: verify.body.step_up_token as string };
}

/** Test shortcut: forget the last spent TOTP step so one more code of the window can be used. */
export async function forgetSpentTotpStep(cp: TestControlPlane, userId: string): Promise<void> {
  await cp.database.db.orm.em.fork().getConnection().execute('update app_user set totp_last_step = null where id = ?', [userId]);
}

// ---- rows -------------------------------------------------------------------

/** Rows of a table, optionally filtered by a SQL condition with ? parameters. */
export async function countRows(cp: TestControlPlane, table: string, where?: string, params: unknown[] = []): Promise<number> {
  if (!/^[a-z_]+$/.test(table)) throw new Error(`bad table name ${table}`);
  const rows = await cp.database.db.orm.em.fork().getConnection().execute(`select count(*)::int as n from ${table}${where ? ` where ${where}` : ''}`, params);
  return rows[0].n as number;
}

/** The row count of every table of the database, by name: for "nothing stored changed" over every table at once. */
export async function everyTableRowCount(cp: TestControlPlane): Promise<Record<string, number>> {
  const tables = await query<{ table_name: string }>(cp, `select table_name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE' order by table_name`);
  const counts: Record<string, number> = {};
  for (const { table_name } of tables) counts[table_name] = await countRows(cp, table_name);
  return counts;
}

export async function query<T = Record<string, unknown>>(cp: TestControlPlane, sql: string, params: unknown[] = []): Promise<T[]> {
  return cp.database.db.orm.em.fork().getConnection().execute(sql, params) as Promise<T[]>;
}

/** Env for files that make many requests from 127.0.0.1: per-IP limits ×1000, no global budget. */
export const RELAXED_LIMITS = { RATE_LIMIT_IP_MULTIPLIER: '1000', RATE_LIMIT_PER_MINUTE: '0' };

/** Forgets a route rate-limit counter, e.g. `totp:account:user:<id>` (test set-up that spent part of a budget). */
export async function resetRateLimit(cp: TestControlPlane, key: string): Promise<void> {
  await cp.app.store.del(`rl:${key}`);
}
