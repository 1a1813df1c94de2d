// Business rules of document 2: registration, e-mail verification, login
// (with MFA), refresh, logout, password reset and change. Route handlers call
// these; nothing here knows about HTTP beyond the Koa context for addresses.
import type { EntityManager } from '@mikro-orm/postgresql';
import { defaultNotificationPreferences, User } from '../accounts/user.entity.ts';
import { withRoles } from '../accounts/user-record.ts';
import { ApiError } from '../http/errors.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { AuthServices as AppServices } from './services.ts';
import { deliver } from '../mail/deliver.ts';
import { passwordResetEmail, registrationAttemptNotice, verificationEmail } from '../mail/templates.ts';
import { OneTimeToken, RecoveryCode, Session, type OneTimeTokenPurpose } from './auth.entities.ts';
import { assignRole, loadUserGrants } from './permissions/permission-service.ts';
import { generateOpaqueToken, hashToken, matchRecoveryCode } from './primitives/opaque-tokens.ts';
import { dummyVerify, hashPassword, needsRehash, verifyPassword, verifyPasswordOrDummy } from './primitives/password.ts';
import { verifyTotp } from './primitives/totp.ts';
import { ACCESS_TOKEN_SCOPE, type AccessTokenResponse } from './token-service.ts';

export const VERIFICATION_TOKEN_TTL_MS = 24 * 60 * 60 * 1000;
export const RESET_TOKEN_TTL_MS = 15 * 60 * 1000;

export const normalizeEmail = (email: string) => email.trim().toLowerCase();


async function issueOneTimeToken(app: AppServices, em: EntityManager, user: User, purpose: OneTimeTokenPurpose, ttlMs: number): Promise<string> {
  // Only the newest link of a kind works.
  await em.nativeUpdate(OneTimeToken, { user: user.id, purpose, used_at: null }, { used_at: new Date() });
  const token = generateOpaqueToken();
  em.create(OneTimeToken, { user, purpose, token_hash: hashToken(token, app.tokenPepper), expires_at: new Date(Date.now() + ttlMs) } as never);
  await em.flush();
  return token;
}

/** Spends a one-time token: exactly once, before it expires. */
async function consumeOneTimeToken(app: AppServices, em: EntityManager, token: string, purpose: OneTimeTokenPurpose): Promise<User> {
  const record = await em.findOne(OneTimeToken, { token_hash: hashToken(token, app.tokenPepper), purpose }, { populate: ['user'] });
  const invalid = () => new ApiError('VALIDATION_ERROR', 'Invalid or expired token', { errors: [{ field: 'token', message: 'Invalid or expired token' }] });
  if (!record || record.used_at || record.expires_at <= new Date()) throw invalid();
  const spent = await em.nativeUpdate(OneTimeToken, { id: record.id, used_at: null }, { used_at: new Date() });
  if (spent !== 1) throw invalid();
  return record.user as unknown as User;
}

/** An access token for a session, carrying the user's current roles (informational). */
async function accessTokenFor(app: AppServices, em: EntityManager, userId: string, sessionId: string): Promise<AccessTokenResponse> {
  const { roles } = await loadUserGrants(em, userId);
  return app.tokens.issueAccessToken({ userId, sessionId, roles });
}

export interface RegisterInput {
  email: string;
  password: string;
  display_name?: string;
  phone?: string;
  locale?: string;
  country_code?: string;
  accept_terms: true;
}

/**
 * Creates a pending account and e-mails a verification link. For an address
 * already registered, the caller sees the same response (a record that is
 * never stored) and the owner gets a notice instead: no enumeration.
 */
export async function register(app: AppServices, em: EntityManager, rc: RequestContext, input: RegisterInput): Promise<User & { roles: string[] }> {
  const email = normalizeEmail(input.email);
  const locale = input.locale ?? rc.locale;
  // Hash first in both branches so the response time does not tell them apart.
  const password_hash = await hashPassword(input.password);
  const now = new Date();
  const fields = {
    email,
    display_name: input.display_name ?? null,
    phone: input.phone ?? null,
    locale,
    country_code: input.country_code ?? null,
    terms_accepted_at: now,
    notification_preferences: { ...defaultNotificationPreferences },
    status: 'pending_verification' as const,
  };
  const existing = await em.findOne(User, { email });
  if (!existing) {
    const user = em.create(User, { ...fields, password_hash } as never);
    try {
      await em.flush();
    } catch (error) {
      // A concurrent registration of the same address won: answer as for an existing one.
      if ((error as { name?: string }).name !== 'UniqueConstraintViolationException') throw error;
      em.clear();
      return registerExisting(app, email, fields, now);
    }
    await assignRole(em, user.id, 'subscriber');
    const token = await issueOneTimeToken(app, em, user, 'email_verification', VERIFICATION_TOKEN_TTL_MS);
    await deliver(app, email, verificationEmail({ publicUrl: app.config.linkBaseUrl, token, displayName: user.display_name ?? undefined }));
    return withRoles(user, ['subscriber']);
  }
  return registerExisting(app, email, fields, now);
}

async function registerExisting(app: AppServices, email: string, fields: Record<string, unknown>, now: Date): Promise<User & { roles: string[] }> {
  await deliver(app, email, registrationAttemptNotice({ publicUrl: app.config.linkBaseUrl }));
  const shadow = Object.assign(new User(), {
    id: crypto.randomUUID(), ...fields, email_verified: false, phone_verified: false, mfa_enabled: false,
    timezone: null, preferred_language: null, avatar_url: null, last_login_at: null, created_at: now, updated_at: now, version: 1,
  });
  return withRoles(shadow as User, ['subscriber']);
}

export async function verifyEmail(app: AppServices, em: EntityManager, token: string): Promise<User & { roles: string[] }> {
  const user = await consumeOneTimeToken(app, em, token, 'email_verification');
  user.email_verified = true;
  if (user.status === 'pending_verification') user.status = 'active';
  await em.flush();
  const { roles } = await loadUserGrants(em, user.id);
  return withRoles(user, roles);
}

/** Sends a fresh verification link if the address belongs to an unverified account; silent otherwise. */
export async function resendVerification(app: AppServices, em: EntityManager, email: string): Promise<void> {
  const user = await em.findOne(User, { email: normalizeEmail(email) });
  if (!user || user.email_verified || user.status !== 'pending_verification') return;
  const token = await issueOneTimeToken(app, em, user, 'email_verification', VERIFICATION_TOKEN_TTL_MS);
  await deliver(app, user.email, verificationEmail({ publicUrl: app.config.linkBaseUrl, token, displayName: user.display_name ?? undefined }));
}

export interface LoginInput {
  email: string;
  password: string;
  totp_code?: string;
  recovery_code?: string;
  device_type?: string;
  platform?: string;
}

export interface LoginResult {
  token: AccessTokenResponse;
  refreshToken: string;
  session: Session;
  user: User;
}

const badCredentials = () => new ApiError('UNAUTHORIZED', 'Invalid e-mail or password');

export async function login(app: AppServices, em: EntityManager, rc: RequestContext, input: LoginInput): Promise<LoginResult> {
  const user = await em.findOne(User, { email: normalizeEmail(input.email) });
  // Unknown address or no password: same work, same answer.
  const passwordOk = await verifyPasswordOrDummy(user?.status === 'deleted' ? null : user?.password_hash, input.password);
  if (!user || !passwordOk) throw badCredentials();
  if (user.status === 'suspended') throw new ApiError('ACCOUNT_SUSPENDED', 'This account is suspended');

  if (user.mfa_enabled) await checkSecondFactor(app, em, user, input);

  if (needsRehash(user.password_hash!)) user.password_hash = await hashPassword(input.password);
  user.last_login_at = new Date();
  // A login invalidates outstanding reset links (document 2 §3).
  await em.nativeUpdate(OneTimeToken, { user: user.id, purpose: 'password_reset', used_at: null }, { used_at: new Date() });
  const { session, refreshToken } = await app.sessions.start(em, user, rc, { device_type: input.device_type, platform: input.platform });
  const token = await accessTokenFor(app, em, user.id, session.id);
  return { token, refreshToken, session, user };
}

async function checkSecondFactor(app: AppServices, em: EntityManager, user: User, input: LoginInput): Promise<void> {
  if (!input.totp_code && !input.recovery_code) {
    throw new ApiError('MFA_REQUIRED', 'A TOTP code or recovery code is required for this account');
  }
  if (input.totp_code) {
    if (!(await acceptTotp(app, em, user, input.totp_code))) throw new ApiError('UNAUTHORIZED', 'Invalid authentication code');
    return;
  }
  if (!(await spendRecoveryCode(app, em, user, input.recovery_code!))) throw new ApiError('UNAUTHORIZED', 'Invalid recovery code');
}

/** Checks a TOTP code against the enabled secret; a code's time step is accepted once. */
export async function acceptTotp(app: AppServices, em: EntityManager, user: User, code: string): Promise<boolean> {
  if (!user.totp_secret_encrypted) return false;
  const secret = app.secretBox.openString(user.totp_secret_encrypted, `totp:${user.id}`);
  const match = await verifyTotp(secret, code, { digits: code.length, afterTimeStep: user.totp_last_step ?? undefined });
  if (!match) return false;
  // Conditional on the step, so two concurrent uses of one code cannot both pass. Plain SQL on
  // purpose: em.nativeUpdate would also move the optimistic-lock version, and the caller's next
  // flush of this (already loaded) user would then fail with 412 PRECONDITION_FAILED.
  const result: { affectedRows?: number } = await em.execute(
    'update app_user set totp_last_step = ? where id = ? and (totp_last_step is null or totp_last_step < ?)',
    [match.timeStep, user.id, match.timeStep],
    'run',
  ) as never;
  if (result.affectedRows !== 1) return false;
  user.totp_last_step = match.timeStep;
  return true;
}

export async function spendRecoveryCode(app: AppServices, em: EntityManager, user: User, code: string): Promise<boolean> {
  const codes = await em.find(RecoveryCode, { user: user.id, used_at: null });
  const index = matchRecoveryCode(code, codes.map((c) => c.code_hash), app.tokenPepper);
  if (index < 0) return false;
  return (await em.nativeUpdate(RecoveryCode, { id: codes[index].id, used_at: null }, { used_at: new Date() })) === 1;
}

export async function refresh(app: AppServices, em: EntityManager, presented: string): Promise<{ token: AccessTokenResponse; refreshToken: string }> {
  const { session, refreshToken } = await app.sessions.rotate(em, presented);
  const user = session.user as unknown as User;
  if (user.status === 'suspended' || user.status === 'deleted') {
    await app.sessions.revoke(em, [session], 'account_inactive');
    throw new ApiError(user.status === 'suspended' ? 'ACCOUNT_SUSPENDED' : 'UNAUTHORIZED', user.status === 'suspended' ? 'This account is suspended' : undefined);
  }
  const token = await accessTokenFor(app, em, user.id, session.id);
  return { token, refreshToken };
}

export async function logout(app: AppServices, em: EntityManager, caller: { id: string; sessionId?: string; tokenId?: string }): Promise<void> {
  if (caller.tokenId) await app.tokens.revokeAccessToken(caller.tokenId);
  if (caller.sessionId) {
    const session = await em.findOne(Session, { id: caller.sessionId, user: caller.id });
    if (session) await app.sessions.revoke(em, [session], 'logout');
  }
}

/** E-mails a reset link when the address belongs to an account; silent otherwise. */
export async function forgotPassword(app: AppServices, em: EntityManager, email: string): Promise<void> {
  const user = await em.findOne(User, { email: normalizeEmail(email) });
  if (!user || user.status === 'deleted') {
    await dummyVerify('timing-equaliser'); // about the cost of the real branch's database and mail work
    return;
  }
  const token = await issueOneTimeToken(app, em, user, 'password_reset', RESET_TOKEN_TTL_MS);
  await deliver(app, user.email, passwordResetEmail({ publicUrl: app.config.linkBaseUrl, token, expiresInMinutes: 15, displayName: user.display_name ?? undefined }));
}

export async function resetPassword(app: AppServices, em: EntityManager, rc: RequestContext, token: string, newPassword: string): Promise<LoginResult> {
  const user = await consumeOneTimeToken(app, em, token, 'password_reset');
  if (user.status === 'suspended') throw new ApiError('ACCOUNT_SUSPENDED', 'This account is suspended');
  if (user.status === 'deleted') throw new ApiError('VALIDATION_ERROR', 'Invalid or expired token', { errors: [{ field: 'token', message: 'Invalid or expired token' }] });
  user.password_hash = await hashPassword(newPassword);
  // The link arrived at the address, which proves it as well as a verification link would.
  if (!user.email_verified) {
    user.email_verified = true;
    if (user.status === 'pending_verification') user.status = 'active';
  }
  await em.flush();
  await app.sessions.revokeAll(em, user.id, 'password_reset');
  const { session, refreshToken } = await app.sessions.start(em, user, rc);
  const accessToken = await accessTokenFor(app, em, user.id, session.id);
  return { token: accessToken, refreshToken, session, user };
}

export interface TokenSet extends AccessTokenResponse {
  refresh_token: string;
  scope: string;
  id_token: string;
}

/** Changes the password, ends every other session, and renews this session's tokens. */
export async function changePassword(app: AppServices, em: EntityManager, rc: RequestContext, caller: { id: string; sessionId?: string; tokenId?: string }, currentPassword: string, newPassword: string): Promise<TokenSet> {
  const user = await em.findOneOrFail(User, caller.id);
  if (!user.password_hash || !(await verifyPassword(user.password_hash, currentPassword))) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'current_password', message: 'Incorrect password' }] });
  }
  if (await verifyPassword(user.password_hash, newPassword)) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'new_password', message: 'Must differ from the current password' }] });
  }
  user.password_hash = await hashPassword(newPassword);
  await em.flush();
  await app.sessions.revokeAll(em, user.id, 'password_change', { except: caller.sessionId });
  // This session carries on with a new token set; the old access token is retired with it.
  if (caller.tokenId) await app.tokens.revokeAccessToken(caller.tokenId);
  let session = caller.sessionId ? await em.findOne(Session, { id: caller.sessionId, user: user.id, revoked_at: null }) : null;
  let refreshToken: string;
  if (session) refreshToken = await app.sessions.renew(em, session);
  else ({ session, refreshToken } = await app.sessions.start(em, user, rc));
  const access = await accessTokenFor(app, em, user.id, session.id);
  return { ...access, refresh_token: refreshToken, scope: ACCESS_TOKEN_SCOPE, id_token: await app.tokens.issueIdToken(user) };
}
