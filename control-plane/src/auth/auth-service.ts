// Business rules of document 2: registration, e-mail verification, login
// (with MFA), refresh, logout, password reset and change. Route handlers call
// these; nothing here knows about HTTP beyond the Koa context for addresses.
import type { EntityManager } from '@mikro-orm/postgresql';
import { insertAccountUnlessTaken, newAccount, User, withRoles } from '../accounts/index.ts';
import { recordAudit } from '../audit/audit.ts';
import { afterCommit, inTransaction, type Actor, type RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { consumeRateLimit, enforceRateLimit } from '../http/rate-limit.ts';
import { deliver } from '../mail/deliver.ts';
import { addressConfirmedNotice, passwordResetEmail, registrationAttemptNotice, verificationEmail } from '../mail/templates.ts';
import { notify } from '../notifications/index.ts';
import { OneTimeToken, RecoveryCode, Session, type OneTimeTokenPurpose } from './auth.entities.ts';
import { FORGOT_PER_ACCOUNT, RESEND_PER_ACCOUNT, TOTP_BUDGET, totpBudgetKey } from './limits.ts';
import { loadUserGrants } from './permissions/permission-service.ts';
import { generateOpaqueToken, hashToken, matchRecoveryCode } from '../tokens/opaque-tokens.ts';
import { hashPassword, needsRehash, verifyPassword, verifyPasswordOrDummy } from './primitives/password.ts';
import { verifyTotp } from './primitives/totp.ts';
import type { AuthServices as AppServices } from './services.ts';
import { ACCESS_TOKEN_SCOPE, type AccessTokenResponse } from './token-service.ts';

export const VERIFICATION_TOKEN_TTL_MS = 24 * 60 * 60 * 1000;
export const RESET_TOKEN_TTL_MS = 15 * 60 * 1000;

export const normalizeEmail = (email: string) => email.trim().toLowerCase();

/** Issues an e-mailed one-time token of a kind (voiding the user's older ones); returns the value to mail. */
export async function issueOneTimeToken(app: AppServices, em: EntityManager, user: User, purpose: OneTimeTokenPurpose, ttlMs: number): Promise<string> {
  // Only the newest link of a kind works.
  await em.nativeUpdate(OneTimeToken, { user: user.id, purpose, used_at: null }, { used_at: new Date() });
  const token = generateOpaqueToken();
  em.create(OneTimeToken, { user, purpose, token_hash: hashToken(token, app.tokenPepper), expires_at: new Date(Date.now() + ttlMs) } as never);
  await em.flush();
  return token;
}

const invalidToken = () => new ApiError('VALIDATION_ERROR', 'Invalid or expired token', { errors: [{ field: 'token', message: 'Invalid or expired token' }] });

/** A one-time token that is live (unspent, unexpired), with its user; 400 on `token` otherwise. */
export async function findLiveOneTimeToken(app: AppServices, em: EntityManager, token: string, purpose: OneTimeTokenPurpose): Promise<OneTimeToken> {
  const record = await em.findOne(OneTimeToken, { token_hash: hashToken(token, app.tokenPepper), purpose }, { populate: ['user'] });
  if (!record || record.used_at || record.expires_at <= new Date()) throw invalidToken();
  return record;
}

/** Spends a live one-time token: a conditional update, so one token works once even under concurrency. */
export async function spendOneTimeToken(em: EntityManager, record: OneTimeToken): Promise<void> {
  const spent = await em.nativeUpdate(OneTimeToken, { id: record.id, used_at: null }, { used_at: new Date() });
  if (spent !== 1) throw invalidToken();
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
 * already registered, the caller sees the same response (a record built the
 * same way, never stored) and the owner gets a notice instead: no enumeration.
 * Both branches do the same work while the client waits (one password hash,
 * one insert statement that does nothing on a taken address, one audit entry);
 * the e-mail of either branch is sent after the response.
 */
export async function register(app: AppServices, rc: RequestContext, input: RegisterInput): Promise<User & { roles: string[] }> {
  const email = normalizeEmail(input.email);
  const now = new Date();
  // The record as it is stored (new address) or answered without being stored (taken address).
  const candidate = newAccount({
    email, status: 'pending_verification', email_verified: false, display_name: input.display_name, phone: input.phone,
    locale: input.locale ?? rc.locale, country_code: input.country_code, terms_accepted_at: now,
  }, now);
  const password_hash = await hashPassword(input.password);
  const created = await rc.em.transactional(async (tx) => {
    // The account, its primary profile and the subscriber role in one statement that does nothing on a taken address.
    const { createdId, existingId } = await insertAccountUnlessTaken(tx, candidate, password_hash, {
      sql: 'insert into user_role (id, user_id, role_name, created_at) select gen_random_uuid(), id, ?, ? from inserted returning user_id',
      params: [SUBSCRIBER, candidate.created_at],
    });
    // Both branches write (and so wait for the same commit to reach the disk): the audit trail
    // records every registration, and attempts on a taken address, which may be someone probing.
    recordAudit(rc, {
      action: createdId ? 'user.registered' : 'user.registration_attempted',
      resource_type: 'user',
      resource_id: createdId ?? existingId,
    }, tx);
    return createdId !== null;
  });
  if (created) app.deferred.defer('verification-mail', () => sendVerificationLink(app, candidate.id), rc.log);
  else app.deferred.defer('repeated-registration-mail', () => answerRepeatedRegistration(app, email), rc.log);
  return withRoles(candidate, [SUBSCRIBER]);
}

/**
 * A registration of an address that already has an account changes nothing
 * (the first registration's password stays). An account still awaiting
 * verification is sent its verification link again, as resend does and
 * within the same budget (RESEND_PER_ACCOUNT); the owner of any other account
 * is told someone tried. Runs after the response, like the first branch.
 */
async function answerRepeatedRegistration(app: AppServices, email: string): Promise<void> {
  const user = await app.db.orm.em.fork().findOne(User, { email });
  if (user && awaitsVerification(user)) {
    if (await withinBudget(app, RESEND_PER_ACCOUNT, email)) await sendVerificationLink(app, user.id, { repeated: true });
    return;
  }
  await deliver(app, email, registrationAttemptNotice({ publicUrl: app.config.linkBaseUrl }));
}

const awaitsVerification = (user: User) => !user.email_verified && user.status === 'pending_verification';

const SUBSCRIBER = 'subscriber';

/** Issues a verification token and e-mails its link, if the account still awaits verification. */
async function sendVerificationLink(app: AppServices, userId: string, options: { repeated?: boolean } = {}): Promise<void> {
  const em = app.db.orm.em.fork() as EntityManager;
  const user = await em.findOne(User, userId);
  if (!user || !awaitsVerification(user)) return;
  const token = await issueOneTimeToken(app, em, user, 'email_verification', VERIFICATION_TOKEN_TTL_MS);
  await deliver(app, user.email, verificationEmail({ publicUrl: app.config.linkBaseUrl, token, displayName: user.display_name ?? undefined, repeated: options.repeated }));
}

export interface VerifyEmailInput {
  token: string;
  /** The password chosen at registration: optional, checked when given (the product's page asks for it). */
  password?: string;
  /** A password replacing the one chosen at registration. */
  new_password?: string;
}

/** What a verification did to the password set before it (audit-logged). */
type PasswordOutcome = 'kept' | 'confirmed' | 'replaced' | 'none';

/**
 * Verifies the address with the e-mailed token alone (document 2): the
 * account becomes active and keeps the password chosen at registration.
 * Anyone can register an address with a password of their choosing and wait
 * for its owner to confirm it (account pre-hijacking), so verification ends
 * every session of the account opened before it, the owner is sent a notice
 * saying what to do if they did not sign up (reset the password, which ends
 * every session), and the password counts as the owner's (password_confirmed,
 * which the role grants need) only when the verifier shows it (`password`)
 * or replaces it (`new_password`). A wrong `password` is 400 on `password`
 * with the token left unspent.
 */
export async function verifyEmail(app: AppServices, rc: RequestContext, input: VerifyEmailInput): Promise<User & { roles: string[] }> {
  // The link and the password are checked before the transaction, so it never waits for argon2.
  const checked = (await findLiveOneTimeToken(app, rc.em, input.token, 'email_verification')).user as unknown as User;
  if (input.password !== undefined && !(checked.password_hash && (await verifyPassword(checked.password_hash, input.password)))) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'password', message: 'Not the password chosen for this account; choose a new one with new_password' }] });
  }
  const replacement = input.new_password === undefined ? undefined : await hashPassword(input.new_password);
  const user = await inTransaction(rc, async (tx) => {
    const record = await findLiveOneTimeToken(app, tx.em, input.token, 'email_verification');
    const user = record.user as unknown as User;
    await spendOneTimeToken(tx.em, record);
    let password: PasswordOutcome;
    if (replacement) password = 'replaced';
    else if (!user.password_hash) password = 'none';
    else password = input.password !== undefined ? 'confirmed' : 'kept';
    if (replacement) user.password_hash = replacement;
    if (password === 'replaced' || password === 'confirmed') user.password_confirmed = true;
    user.email_verified = true;
    if (user.status === 'pending_verification') user.status = 'active';
    // No session opened before the owner confirmed the address survives it (a squatter's included).
    await app.sessions.revokeAll(tx.em, user.id, 'email_verified');
    // Named so the audit's secret masking leaves the outcome readable (it masks every key naming a password).
    recordAudit(tx, { action: 'user.email_verified', resource_type: 'user', resource_id: user.id, metadata: { earlier_credential: password } }, tx.em);
    await tx.em.flush();
    afterCommit(tx, () => app.deferred.defer('address-confirmed-notice', () => sendAddressConfirmedNotice(app, user.id), rc.log));
    return user;
  });
  const { roles } = await loadUserGrants(rc.em, user.id);
  return withRoles(user, roles);
}

/**
 * Whether an account's owner is known to hold it: a confirmed address and a
 * password the mailbox's owner chose or confirmed (`password_confirmed`: a
 * verification with the token alone keeps the registrant's password without
 * saying who chose it). Anyone can register an address and wait: an account
 * that is not owned this way is never handed a role as it is (CDN admin users
 * invite it, admin:create refuses it).
 */
export const ownedByItsOwner = (user: Pick<User, 'email_verified' | 'password_hash' | 'password_confirmed' | 'status'>) =>
  user.email_verified && user.password_hash !== null && user.password_confirmed && user.status !== 'pending_verification';

/** Tells the owner of a newly confirmed address what to do if they did not sign up. */
async function sendAddressConfirmedNotice(app: AppServices, userId: string): Promise<void> {
  const user = await app.db.orm.em.fork().findOne(User, userId);
  if (!user || user.status === 'deleted') return;
  await deliver(app, user.email, addressConfirmedNotice({ publicUrl: app.config.linkBaseUrl, displayName: user.display_name ?? undefined }));
}

/** Spends one unit of a per-address e-mail budget; false once it is spent (the caller then sends nothing). */
async function withinBudget(app: AppServices, budget: { name: string; limit: number; windowSeconds: number }, address: string): Promise<boolean> {
  return (await consumeRateLimit(app.store, `${budget.name}:${address}`, budget.limit, budget.windowSeconds)).allowed;
}

/**
 * Sends a fresh verification link if the address belongs to an unverified
 * account and has links left this hour (RESEND_PER_ACCOUNT); silent
 * otherwise. The budget, the look-up and the e-mail happen after the
 * response, so the answer and its timing are the same for every address and
 * every request ("200 always").
 */
export function resendVerification(app: AppServices, rc: RequestContext, email: string): void {
  const address = normalizeEmail(email);
  app.deferred.defer('verification-mail', async () => {
    if (!(await withinBudget(app, RESEND_PER_ACCOUNT, address))) return;
    const em = app.db.orm.em.fork() as EntityManager;
    const user = await em.findOne(User, { email: address });
    if (user) await sendVerificationLink(app, user.id);
  }, rc.log);
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

export async function login(app: AppServices, rc: RequestContext, input: LoginInput): Promise<LoginResult> {
  const em = rc.em;
  const user = await em.findOne(User, { email: normalizeEmail(input.email) });
  // Unknown address or no password: same work, same answer.
  const passwordOk = await verifyPasswordOrDummy(user?.status === 'deleted' ? null : user?.password_hash, input.password);
  if (!user || !passwordOk) throw badCredentials();
  if (user.status === 'suspended') throw new ApiError('ACCOUNT_SUSPENDED', 'This account is suspended');

  if (user.mfa_enabled) await checkSecondFactor(app, em, user, input);

  const rehash = needsRehash(user.password_hash!) ? await hashPassword(input.password) : null;
  // A login invalidates outstanding reset links (document 2 §3).
  await em.nativeUpdate(OneTimeToken, { user: user.id, purpose: 'password_reset', used_at: null }, { used_at: new Date() });
  const { session, refreshToken } = await app.sessions.start(em, user, rc, { device_type: input.device_type, platform: input.platform });
  // Last, and one statement rather than a read-modify-write of the entity: concurrent logins
  // of one account must not fail each other on the record's version (it still moves, so ETags do).
  await em.execute(
    `update app_user set last_login_at = now(), password_hash = coalesce(?, password_hash), version = version + 1, updated_at = now() where id = ?`,
    [rehash, user.id],
  );
  const token = await accessTokenFor(app, em, user.id, session.id);
  return { token, refreshToken, session, user };
}

/**
 * The second factor of an account with MFA: a TOTP code or a recovery code.
 * With `budget`, each code presented spends one unit of the account's TOTP
 * budget first (429 once it is spent).
 */
async function checkSecondFactor(app: AppServices, em: EntityManager, user: User, input: { totp_code?: string; recovery_code?: string }, options: { budget?: boolean } = {}): Promise<void> {
  if (!input.totp_code && !input.recovery_code) {
    throw new ApiError('MFA_REQUIRED', 'A TOTP code or recovery code is required for this account');
  }
  if (options.budget) await enforceRateLimit(app.store, totpBudgetKey(user.id), TOTP_BUDGET.limit, TOTP_BUDGET.windowSeconds);
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

export async function refresh(app: AppServices, rc: RequestContext, presented: string): Promise<{ token: AccessTokenResponse; refreshToken: string }> {
  const em = rc.em;
  const { session, refreshToken } = await app.sessions.rotate(em, presented);
  const user = session.user as unknown as User;
  if (user.status === 'suspended' || user.status === 'deleted') {
    await app.sessions.revoke(em, [session], 'account_inactive');
    throw new ApiError(user.status === 'suspended' ? 'ACCOUNT_SUSPENDED' : 'UNAUTHORIZED', user.status === 'suspended' ? 'This account is suspended' : undefined);
  }
  const token = await accessTokenFor(app, em, user.id, session.id);
  return { token, refreshToken };
}

export async function logout(app: AppServices, rc: RequestContext, caller: Actor): Promise<void> {
  const em = rc.em;
  if (caller.tokenId) await app.tokens.revokeAccessToken(caller.tokenId);
  if (caller.sessionId) {
    const session = await em.findOne(Session, { id: caller.sessionId, user: caller.id });
    if (session) await app.sessions.revoke(em, [session], 'logout');
  }
}

/** Ends one of the caller's sessions; the current one (or `current`) is a logout. */
export async function revokeSession(app: AppServices, rc: RequestContext, sessionId: string | 'current'): Promise<{ loggedOut: boolean }> {
  const caller = rc.actor;
  if (!caller) throw new ApiError('UNAUTHORIZED');
  if (sessionId === 'current' || sessionId === caller.sessionId) {
    await logout(app, rc, caller);
    return { loggedOut: true };
  }
  const session = await rc.em.findOne(Session, { id: sessionId, user: caller.id, revoked_at: null });
  if (!session) throw new ApiError('NOT_FOUND', 'Session not found');
  await app.sessions.revoke(rc.em, [session], 'revoked_by_user');
  return { loggedOut: false };
}

/**
 * E-mails a reset link when the address belongs to an account and has links
 * left this hour (FORGOT_PER_ACCOUNT); silent otherwise. The budget, the
 * look-up and the e-mail happen after the response, so the answer and its
 * timing are the same whether or not the address exists ("200 always").
 */
export function forgotPassword(app: AppServices, rc: RequestContext, email: string): void {
  const address = normalizeEmail(email);
  app.deferred.defer('password-reset-mail', async () => {
    if (await withinBudget(app, FORGOT_PER_ACCOUNT, address)) await sendPasswordResetLink(app, { email: address });
  }, rc.log);
}

/** Issues a reset token and e-mails its link to the account (by id or address), unless there is none or it is deleted. */
async function sendPasswordResetLink(app: AppServices, who: string | { email: string }): Promise<void> {
  const em = app.db.orm.em.fork() as EntityManager;
  const user = await em.findOne(User, who);
  if (!user || user.status === 'deleted') return;
  const token = await issueOneTimeToken(app, em, user, 'password_reset', RESET_TOKEN_TTL_MS);
  await deliver(app, user.email, passwordResetEmail({ publicUrl: app.config.linkBaseUrl, token, expiresInMinutes: 15, displayName: user.display_name ?? undefined }));
}

export interface ResetPasswordInput {
  token: string;
  new_password: string;
  totp_code?: string;
  recovery_code?: string;
}

/**
 * Sets a new password with a reset token, revokes every session and starts a
 * new one. An account with MFA also needs a TOTP or recovery code: a mailbox
 * alone must not take the account. Without one → 401 MFA_REQUIRED, a wrong
 * one → 401 (counted against the account's TOTP budget); either way the
 * reset token stays unspent, so the user can retry with the code.
 */
export async function resetPassword(app: AppServices, rc: RequestContext, input: ResetPasswordInput): Promise<LoginResult> {
  const em = rc.em;
  const record = await findLiveOneTimeToken(app, em, input.token, 'password_reset');
  const user = record.user as unknown as User;
  if (user.status === 'suspended') throw new ApiError('ACCOUNT_SUSPENDED', 'This account is suspended');
  if (user.status === 'deleted') throw invalidToken();
  if (user.mfa_enabled) await checkSecondFactor(app, em, user, input, { budget: true });
  await spendOneTimeToken(em, record);
  user.password_hash = await hashPassword(input.new_password);
  user.password_confirmed = true; // chosen by whoever holds the mailbox
  // The link arrived at the address, which proves it as well as a verification link would.
  if (!user.email_verified) {
    user.email_verified = true;
    if (user.status === 'pending_verification') user.status = 'active';
  }
  // Committed with the new password; the owner is told in the app and by e-mail.
  await notify(app, rc, {
    userId: user.id, type: 'password_reset', priority: 'high',
    title: 'Your password was reset',
    body: 'Your password was reset with a link sent to this address, and every session was signed out. If you did not do this, reset your password again at once and contact support.',
  });
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
export async function changePassword(app: AppServices, rc: RequestContext, caller: Actor, currentPassword: string, newPassword: string): Promise<TokenSet> {
  const em = rc.em;
  const user = await em.findOneOrFail(User, caller.id);
  if (!user.password_hash || !(await verifyPassword(user.password_hash, currentPassword))) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'current_password', message: 'Incorrect password' }] });
  }
  if (await verifyPassword(user.password_hash, newPassword)) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'new_password', message: 'Must differ from the current password' }] });
  }
  user.password_hash = await hashPassword(newPassword);
  // Committed with the new password; the owner is told in the app and by e-mail.
  await notify(app, rc, {
    userId: user.id, type: 'password_changed', priority: 'high',
    title: 'Your password was changed',
    body: 'The password of your account was changed and your other sessions were signed out. If you did not do this, reset your password at once and contact support.',
  });
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
