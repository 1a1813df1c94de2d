// Routes of document 2 (paths in DESIGN.md §6), and the password change of
// document 1 §4.1 (it ends sessions and issues tokens, so it is auth's). Each
// handler: validated input → service call → value (presented by the router).
import { z } from 'zod';
import { userResource } from '../accounts/index.ts';
import { ApiError } from '../http/errors.ts';
import { STEP_UP_TOKEN_HEADER, stepUpTokenHeader } from '../http/headers.ts';
import { bare, data, empty, list, reply, type RateLimitRule } from '../http/route.ts';
import { requireActor } from './access-control.ts';
import { Session } from './auth.entities.ts';
import * as auth from './auth-service.ts';
import { FORGOT_PER_ACCOUNT, RESEND_PER_ACCOUNT } from './limits.ts';
import { clearRefreshCookie, readRefreshCookie, setRefreshCookie } from './cookies.ts';
import { setDeviceCookie, trustedDevice } from './device-cookie.ts';
import { totpLimit } from './limits.ts';
import * as mfa from './mfa-service.ts';
import {
  accessTokenResponse, changePasswordBody, emailOnlyBody, loginBody, messageRecord, recoveryCodesResponse, registerBody,
  resetPasswordBody, sessionRecord, stepUpResponse, tokenSetResponse, totpBody, verifyEmailBody,
} from './schemas.ts';
import { defineAuthRoute as defineRoute, type AuthServices } from './services.ts';

const tags = ['Authentication'];
const byEmail = (input: { body: any }): string | undefined => (typeof input.body?.email === 'string' ? auth.normalizeEmail(input.body.email) : undefined);
const perIp = (name: string, limit: number, windowSeconds: number): RateLimitRule => ({ name: `${name}:ip`, limit, windowSeconds, by: 'ip' });
/**
 * Login guesses: a request carrying a valid device cookie for the account (it
 * logged in to it before) spends that device's budget; any other spends the
 * account's. Others' wrong passwords thus lock out untrusted clients only.
 */
const loginPerAccountOrDevice = (limit: number, windowSeconds: number): RateLimitRule<AuthServices>[] => [
  { name: 'login:account', limit, windowSeconds, by: (input) => { const email = byEmail(input); return email && !trustedDevice(input.app, input.ctx, email) ? email : undefined; } },
  { name: 'login:device', limit, windowSeconds, by: (input) => { const email = byEmail(input); return email ? trustedDevice(input.app, input.ctx, email) : undefined; } },
];

export const registerRoute = defineRoute({
  method: 'post', path: '/v1/auth/register', tags, access: 'public',
  summary: 'Register an account',
  description: 'Creates an account in pending_verification and e-mails a verification link. The response is the same whether or not the address is already registered.',
  body: registerBody,
  rateLimits: [perIp('register', 10, 3600)],
  responses: { 201: data(userResource) },
  async handler({ body, rc, app }) {
    const user = await auth.register(app, rc, body);
    return reply.created(user, '/v1/users/me');
  },
});

export const loginRoute = defineRoute({
  method: 'post', path: '/v1/auth/login', tags, access: 'public',
  summary: 'Log in with e-mail and password',
  description: 'Returns an access token and sets the refresh-token cookie, and a device cookie that marks this client as one the account has logged in from. '
    + 'Accounts with MFA also send totp_code or recovery_code (401 MFA_REQUIRED without). '
    + 'Attempts are limited per account (10 per 15 minutes); attempts carrying the account\'s device cookie count against that device instead, '
    + 'so wrong passwords sent by others do not lock the owner out of clients they have used before.',
  body: loginBody,
  rateLimits: [perIp('login', 30, 900), ...loginPerAccountOrDevice(10, 900)],
  responses: { 200: data(accessTokenResponse) },
  errors: ['UNAUTHORIZED', 'MFA_REQUIRED', 'ACCOUNT_SUSPENDED'],
  async handler({ body, rc, ctx, app }) {
    const result = await auth.login(app, rc, body);
    setRefreshCookie(ctx, app.config, result.refreshToken);
    setDeviceCookie(ctx, app, result.user.email);
    return result.token;
  },
});

export const refreshRoute = defineRoute({
  method: 'post', path: '/v1/auth/refresh', tags, access: 'public',
  summary: 'Exchange the refresh-token cookie for a new token pair',
  description: 'Single use: every call rotates the cookie. Presenting an already used refresh token revokes its whole session.',
  rateLimits: [perIp('refresh', 120, 60)],
  responses: { 200: data(accessTokenResponse) },
  errors: ['UNAUTHORIZED', 'ACCOUNT_SUSPENDED'],
  async handler({ rc, ctx, app }) {
    const presented = readRefreshCookie(ctx);
    if (!presented) throw new ApiError('UNAUTHORIZED', 'Refresh token cookie missing');
    try {
      const result = await auth.refresh(app, rc, presented);
      setRefreshCookie(ctx, app.config, result.refreshToken);
      return result.token;
    } catch (error) {
      clearRefreshCookie(ctx, app.config);
      throw error;
    }
  },
});

export const logoutRoute = defineRoute({
  method: 'post', path: '/v1/auth/logout', tags, access: 'authenticated',
  summary: 'Log out',
  description: 'Revokes the current access token at once, ends the session and clears the refresh-token cookie.',
  responses: { 200: data(messageRecord) },
  async handler({ rc, ctx, app }) {
    await auth.logout(app, rc, requireActor(rc));
    clearRefreshCookie(ctx, app.config);
    return { message: 'Logged out' };
  },
});

export const forgotPasswordRoute = defineRoute({
  method: 'post', path: '/v1/auth/password/forgot', tags, access: 'public',
  summary: 'Request a password-reset link',
  description: 'Always 200, whether or not the address exists, and in the same time: the reset link is e-mailed after the response. The link is single use and valid 15 minutes. '
    + `At most ${FORGOT_PER_ACCOUNT.limit} links an hour per address: past that the answer is the same and nothing is sent.`,
  body: emailOnlyBody,
  rateLimits: [perIp('forgot', 10, 3600)],
  responses: { 200: data(messageRecord) },
  async handler({ body, rc, app }) {
    auth.forgotPassword(app, rc, body.email);
    return { message: 'If an account exists for this address, a reset link has been sent' };
  },
});

export const resetPasswordRoute = defineRoute({
  method: 'post', path: '/v1/auth/password/reset', tags, access: 'public',
  summary: 'Set a new password with a reset token',
  description: 'Revokes every session of the account and returns a new access token (bare) with a refresh-token cookie. '
    + 'An account with MFA also sends totp_code or recovery_code: without one the answer is 401 MFA_REQUIRED, with a wrong one 401 UNAUTHORIZED '
    + '(each code counts against the account\'s TOTP budget of 5 per 5 minutes, then 429), and in both cases the reset token stays valid for a retry. '
    + 'A recovery code used here is spent.',
  body: resetPasswordBody,
  rateLimits: [perIp('reset', 20, 3600)],
  responses: { 200: bare(accessTokenResponse) },
  errors: ['ACCOUNT_SUSPENDED', 'MFA_REQUIRED', 'UNAUTHORIZED'],
  async handler({ body, rc, ctx, app }) {
    const result = await auth.resetPassword(app, rc, body);
    setRefreshCookie(ctx, app.config, result.refreshToken);
    return result.token;
  },
});

export const verifyEmailRoute = defineRoute({
  method: 'post', path: '/v1/auth/email/verify', tags, access: 'public',
  summary: 'Verify the e-mail address with the token from the link',
  description: 'Moves the account to active with the token alone; the password chosen at registration stays and signs in. '
    + 'Anyone can register an address with a password of their choosing and sign in before its owner confirms it, so every session of the '
    + 'account opened before the verification ends, and the address is sent a notice saying what to do if its owner did not sign up '
    + '(reset the password, which ends every session). Optional: `password`, checked when given (a wrong one is 400 on `password` and '
    + 'leaves the token usable), or `new_password`, which replaces the password.',
  body: verifyEmailBody,
  rateLimits: [perIp('verify-email', 30, 3600)],
  responses: { 200: data(userResource) },
  async handler({ body, rc, app }) {
    return auth.verifyEmail(app, rc, body);
  },
});

export const resendVerificationRoute = defineRoute({
  method: 'post', path: '/v1/auth/email/resend', tags, access: 'public',
  summary: 'Send the verification e-mail again',
  description: 'Always 200, and in the same time whatever the address: the link is e-mailed after the response. '
    + `At most ${RESEND_PER_ACCOUNT.limit} links an hour per account: past that the answer is the same and nothing is sent.`,
  body: emailOnlyBody,
  rateLimits: [perIp('resend', 20, 3600)],
  responses: { 200: data(messageRecord) },
  async handler({ body, rc, app }) {
    auth.resendVerification(app, rc, body.email);
    return { message: 'If the account is awaiting verification, a new link has been sent' };
  },
});

const sessionValue = (s: Session, currentId: string | undefined) => ({
  session_id: s.id,
  device_type: s.device_type,
  platform: s.platform ?? null,
  ip_address_hint: s.ip_address_hint ?? null,
  is_current: s.id === currentId,
  created_at: s.created_at,
  last_active_at: s.last_active_at,
});

export const listSessionsRoute = defineRoute({
  method: 'get', path: '/v1/me/auth/sessions', tags, access: { permission: 'sessions.read', resourceType: 'user', allowPendingDeletion: true },
  summary: 'List the active sessions of the current account',
  responses: { 200: list(sessionRecord) },
  async handler({ rc, app }) {
    const caller = requireActor(rc);
    const sessions = await app.sessions.active(rc.em, caller.id);
    return sessions.map((s) => sessionValue(s, caller.sessionId));
  },
});

export const revokeSessionRoute = defineRoute({
  method: 'delete', path: '/v1/me/auth/sessions/:session_id', tags, access: { permission: 'sessions.revoke', resourceType: 'user', allowPendingDeletion: true },
  summary: 'Revoke one session (the literal `current` logs out)',
  params: z.strictObject({ session_id: z.union([z.literal('current'), z.uuid()], { message: 'Must be a session id or current' }) }),
  responses: { 204: empty },
  async handler({ params, rc, ctx, app }) {
    const { loggedOut } = await auth.revokeSession(app, rc, params.session_id);
    if (loggedOut) clearRefreshCookie(ctx, app.config);
    return reply.noContent();
  },
});

export const mfaSetupRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/setup', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Start TOTP setup',
  description: 'Returns a new secret and otpauth URI; MFA is enabled once a code from it is confirmed with the verify operation.',
  responses: { 200: data(z.object({ secret: z.string(), otpauth_uri: z.string() })) },
  errors: ['CONFLICT'],
  async handler({ rc, app }) {
    return mfa.setupMfa(app, rc);
  },
});

export const mfaVerifyRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/verify', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Verify a TOTP code: confirms setup, or issues a step-up token',
  description: 'Returns a step-up token (bare). The first verification after setup enables MFA and also returns recovery_codes, shown only this once.',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: bare(stepUpResponse.extend({ recovery_codes: recoveryCodesResponse.optional() })) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    return mfa.verifyMfa(app, rc, body.totp_code);
  },
});

export const mfaDisableRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/disable', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Disable MFA (revokes every session)',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: data(z.object({ mfa_enabled: z.literal(false) })) },
  errors: ['CONFLICT'],
  async handler({ body, rc, ctx, app }) {
    await mfa.disableMfa(app, rc, body.totp_code);
    clearRefreshCookie(ctx, app.config);
    return { mfa_enabled: false as const };
  },
});

export const readRecoveryCodesRoute = defineRoute({
  method: 'get', path: '/v1/me/auth/mfa/recovery-codes', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'List the unused recovery codes (masked)',
  description: 'Needs a step-up token in X-Step-Up-Token, obtained in the same session within its 300 seconds. Codes are stored hashed, so only their last characters are shown; regenerate to see new plaintext codes.',
  headers: [stepUpTokenHeader],
  responses: { 200: bare(recoveryCodesResponse.extend({ remaining: z.number().int() })) },
  errors: ['STEP_UP_REQUIRED', 'CONFLICT'],
  async handler({ rc, ctx, app }) {
    return mfa.listRecoveryCodes(app, rc, ctx.get(STEP_UP_TOKEN_HEADER));
  },
});

export const regenerateRecoveryCodesRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/recovery-codes/regenerate', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Replace the recovery codes (all earlier codes stop working)',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: bare(recoveryCodesResponse) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    return mfa.regenerateRecoveryCodes(app, rc, body.totp_code);
  },
});

export const jwksRoute = defineRoute({
  method: 'get', path: '/.well-known/jwks.json', tags, access: 'public',
  summary: 'Public keys that verify access tokens',
  responses: { 200: bare(z.object({ keys: z.array(z.record(z.string(), z.unknown())) })) },
  async handler({ app }) {
    return reply.with(200, app.tokens.jwks(), { 'cache-control': 'public, max-age=300' });
  },
});

export const changePasswordRoute = defineRoute({
  method: 'post', path: '/v1/users/me/password', tags: ['Account'],
  access: { permission: 'users.update', resourceType: 'user' },
  summary: 'Change the password',
  description: 'Ends every other session; this session continues with the returned token set (the refresh token also comes as the cookie).',
  body: changePasswordBody,
  rateLimits: [{ name: 'change-password', limit: 10, windowSeconds: 3600, by: 'caller' }],
  responses: { 200: data(tokenSetResponse) },
  async handler({ body, rc, ctx, app }) {
    const tokenSet = await auth.changePassword(app, rc, requireActor(rc), body.current_password, body.new_password);
    setRefreshCookie(ctx, app.config, tokenSet.refresh_token);
    return tokenSet;
  },
});

export const authRoutes = [
  registerRoute, loginRoute, refreshRoute, logoutRoute, forgotPasswordRoute, resetPasswordRoute,
  verifyEmailRoute, resendVerificationRoute, listSessionsRoute, revokeSessionRoute,
  mfaSetupRoute, mfaVerifyRoute, mfaDisableRoute, readRecoveryCodesRoute, regenerateRecoveryCodesRoute, jwksRoute,
  changePasswordRoute,
];
