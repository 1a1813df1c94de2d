// Routes of document 2 (paths in DESIGN.md §6). Each handler: validated input
// → service call → response.
import { z } from 'zod';
import { presentUser, userRecord } from '../accounts/user-presenter.ts';
import { ApiError } from '../http/errors.ts';
import { defineRoute, reply, type RateLimitRule } from '../http/route.ts';
import { currentCaller } from './access-control.ts';
import { Session } from './auth.entities.ts';
import * as auth from './auth-service.ts';
import { clearRefreshCookie, readRefreshCookie, setRefreshCookie } from './cookies.ts';
import { setDeviceCookie, trustedDevice } from './device-cookie.ts';
import { totpLimit } from './limits.ts';
import * as mfa from './mfa-service.ts';
import {
  accessTokenResponse, emailOnlyBody, loginBody, messageResponse, recoveryCodesResponse, registerBody,
  resetPasswordBody, sessionRecord, stepUpResponse, tokenBody, totpBody,
} from './schemas.ts';

const tags = ['Authentication'];
const byEmail = (input: { body: any }): string | undefined => (typeof input.body?.email === 'string' ? auth.normalizeEmail(input.body.email) : undefined);
const perIp = (name: string, limit: number, windowSeconds: number): RateLimitRule => ({ name: `${name}:ip`, limit, windowSeconds, by: 'ip' });
const perAccount = (name: string, limit: number, windowSeconds: number): RateLimitRule => ({ name: `${name}:account`, limit, windowSeconds, by: byEmail });
/**
 * Login guesses: a request carrying a valid device cookie for the account (it
 * logged in to it before) spends that device's budget; any other spends the
 * account's. Others' wrong passwords thus lock out untrusted clients only.
 */
const loginPerAccountOrDevice = (limit: number, windowSeconds: number): RateLimitRule[] => [
  { name: 'login:account', limit, windowSeconds, by: (input) => { const email = byEmail(input); return email && !trustedDevice(input.app, input.ctx, email) ? email : undefined; } },
  { name: 'login:device', limit, windowSeconds, by: (input) => { const email = byEmail(input); return email ? trustedDevice(input.app, input.ctx, email) : undefined; } },
];

export const registerRoute = defineRoute({
  method: 'post', path: '/v1/auth/register', tags, access: 'public',
  summary: 'Register an account',
  description: 'Creates an account in pending_verification and e-mails a verification link. The response is the same whether or not the address is already registered.',
  body: registerBody,
  rateLimits: [perIp('register', 10, 3600)],
  responses: { 201: z.object({ data: userRecord }) },
  async handler({ body, em, ctx, app, log }) {
    const user = await auth.register(app, em, ctx, body, log);
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
  responses: { 200: z.object({ data: accessTokenResponse }) },
  errors: ['UNAUTHORIZED', 'MFA_REQUIRED', 'ACCOUNT_SUSPENDED'],
  async handler({ body, em, ctx, app }) {
    const result = await auth.login(app, em, ctx, body);
    setRefreshCookie(ctx, app.config, result.refreshToken);
    setDeviceCookie(ctx, app, result.user.email);
    return reply.data(result.token);
  },
});

export const refreshRoute = defineRoute({
  method: 'post', path: '/v1/auth/refresh', tags, access: 'public',
  summary: 'Exchange the refresh-token cookie for a new token pair',
  description: 'Single use: every call rotates the cookie. Presenting an already used refresh token revokes its whole session.',
  rateLimits: [perIp('refresh', 120, 60)],
  responses: { 200: z.object({ data: accessTokenResponse }) },
  errors: ['UNAUTHORIZED', 'ACCOUNT_SUSPENDED'],
  async handler({ em, ctx, app }) {
    const presented = readRefreshCookie(ctx);
    if (!presented) throw new ApiError('UNAUTHORIZED', 'Refresh token cookie missing');
    try {
      const result = await auth.refresh(app, em, presented);
      setRefreshCookie(ctx, app.config, result.refreshToken);
      return reply.data(result.token);
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
  responses: { 200: messageResponse },
  async handler({ em, ctx, app }) {
    await auth.logout(app, em, currentCaller(ctx));
    clearRefreshCookie(ctx, app.config);
    return reply.data({ message: 'Logged out' });
  },
});

export const forgotPasswordRoute = defineRoute({
  method: 'post', path: '/v1/auth/password/forgot', tags, access: 'public',
  summary: 'Request a password-reset link',
  description: 'Always 200, whether or not the address exists, and in the same time: the reset link is e-mailed after the response. The link is single use and valid 15 minutes.',
  body: emailOnlyBody,
  rateLimits: [perIp('forgot', 10, 3600), perAccount('forgot', 5, 3600)],
  responses: { 200: messageResponse },
  async handler({ body, app, log }) {
    auth.forgotPassword(app, body.email, log);
    return reply.data({ message: 'If an account exists for this address, a reset link has been sent' });
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
  responses: { 200: accessTokenResponse },
  errors: ['ACCOUNT_SUSPENDED', 'MFA_REQUIRED', 'UNAUTHORIZED'],
  async handler({ body, em, ctx, app }) {
    const result = await auth.resetPassword(app, em, ctx, body);
    setRefreshCookie(ctx, app.config, result.refreshToken);
    return reply.bare(result.token);
  },
});

export const verifyEmailRoute = defineRoute({
  method: 'post', path: '/v1/auth/email/verify', tags, access: 'public',
  summary: 'Verify the e-mail address with the token from the link',
  body: tokenBody,
  rateLimits: [perIp('verify-email', 30, 3600)],
  responses: { 200: z.object({ data: userRecord }) },
  async handler({ body, em, app }) {
    return reply.data(await auth.verifyEmail(app, em, body.token));
  },
});

export const resendVerificationRoute = defineRoute({
  method: 'post', path: '/v1/auth/email/resend', tags, access: 'public',
  summary: 'Send the verification e-mail again',
  description: 'Always 200, and in the same time whatever the address: the link is e-mailed after the response. At most 3 requests per hour per account.',
  body: emailOnlyBody,
  rateLimits: [perAccount('resend', 3, 3600), perIp('resend', 20, 3600)],
  responses: { 200: messageResponse },
  async handler({ body, app, log }) {
    auth.resendVerification(app, body.email, log);
    return reply.data({ message: 'If the account is awaiting verification, a new link has been sent' });
  },
});

const presentSession = (s: Session, currentId: string | undefined) => ({
  session_id: s.id,
  device_type: s.device_type,
  platform: s.platform ?? null,
  ip_address_hint: s.ip_address_hint ?? null,
  is_current: s.id === currentId,
  created_at: s.created_at.toISOString(),
  last_active_at: s.last_active_at.toISOString(),
});

export const listSessionsRoute = defineRoute({
  method: 'get', path: '/v1/me/auth/sessions', tags, access: { permission: 'sessions.read', resourceType: 'user' },
  summary: 'List the active sessions of the current account',
  responses: { 200: z.object({ data: z.array(sessionRecord) }) },
  async handler({ em, ctx, app }) {
    const caller = currentCaller(ctx);
    const sessions = await app.sessions.active(em, caller.id);
    return reply.data(sessions.map((s) => presentSession(s, caller.sessionId)));
  },
});

export const revokeSessionRoute = defineRoute({
  method: 'delete', path: '/v1/me/auth/sessions/:session_id', tags, access: { permission: 'sessions.revoke', resourceType: 'user' },
  summary: 'Revoke one session (the literal `current` logs out)',
  params: z.strictObject({ session_id: z.union([z.literal('current'), z.uuid()], { message: 'Must be a session id or current' }) }),
  responses: { 204: null },
  errors: ['NOT_FOUND'],
  async handler({ params, em, ctx, app }) {
    const caller = currentCaller(ctx);
    if (params.session_id === 'current' || params.session_id === caller.sessionId) {
      await auth.logout(app, em, caller);
      clearRefreshCookie(ctx, app.config);
      return reply.noContent();
    }
    const session = await em.findOne(Session, { id: params.session_id, user: caller.id, revoked_at: null });
    if (!session) throw new ApiError('NOT_FOUND', 'Session not found');
    await app.sessions.revoke(em, [session], 'revoked_by_user');
    return reply.noContent();
  },
});

export const mfaSetupRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/setup', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Start TOTP setup',
  description: 'Returns a new secret and otpauth URI; MFA is enabled once a code from it is confirmed with the verify operation.',
  responses: { 200: z.object({ data: z.object({ secret: z.string(), otpauth_uri: z.string() }) }) },
  errors: ['CONFLICT'],
  async handler({ em, ctx, app }) {
    return reply.data(await mfa.setupMfa(app, em, currentCaller(ctx).id));
  },
});

export const mfaVerifyRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/verify', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Verify a TOTP code: confirms setup, or issues a step-up token',
  description: 'Returns a step-up token (bare). The first verification after setup enables MFA and also returns recovery_codes, shown only this once.',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: stepUpResponse.extend({ recovery_codes: recoveryCodesResponse.optional() }) },
  errors: ['CONFLICT'],
  async handler({ body, em, ctx, app }) {
    const caller = currentCaller(ctx);
    return reply.bare(await mfa.verifyMfa(app, em, caller.id, caller.sessionId ?? '', body.totp_code));
  },
});

export const mfaDisableRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/disable', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Disable MFA (revokes every session)',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: z.object({ data: z.object({ mfa_enabled: z.literal(false) }) }) },
  errors: ['CONFLICT'],
  async handler({ body, em, ctx, app }) {
    await mfa.disableMfa(app, em, currentCaller(ctx).id, body.totp_code);
    clearRefreshCookie(ctx, app.config);
    return reply.data({ mfa_enabled: false as const });
  },
});

export const readRecoveryCodesRoute = defineRoute({
  method: 'get', path: '/v1/me/auth/mfa/recovery-codes', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'List the unused recovery codes (masked)',
  description: 'Needs a step-up token in X-Step-Up-Token, obtained in the same session within its 300 seconds. Codes are stored hashed, so only their last characters are shown; regenerate to see new plaintext codes.',
  responses: { 200: recoveryCodesResponse.extend({ remaining: z.number().int() }) },
  errors: ['STEP_UP_REQUIRED', 'CONFLICT'],
  async handler({ em, ctx, app }) {
    const caller = currentCaller(ctx);
    const stepUp = ctx.get('x-step-up-token');
    if (!stepUp) throw new ApiError('STEP_UP_REQUIRED', 'A step-up token is required in X-Step-Up-Token');
    try {
      await app.tokens.verifyStepUpToken(stepUp, { userId: caller.id, sessionId: caller.sessionId });
    } catch {
      throw new ApiError('STEP_UP_REQUIRED', 'The step-up token is invalid or expired');
    }
    return reply.bare(await mfa.listRecoveryCodes(em, caller.id));
  },
});

export const regenerateRecoveryCodesRoute = defineRoute({
  method: 'post', path: '/v1/me/auth/mfa/recovery-codes/regenerate', tags, access: { permission: 'mfa.manage', resourceType: 'user' },
  summary: 'Replace the recovery codes (all earlier codes stop working)',
  body: totpBody,
  rateLimits: [totpLimit],
  responses: { 200: recoveryCodesResponse },
  errors: ['CONFLICT'],
  async handler({ body, em, ctx, app }) {
    return reply.bare(await mfa.regenerateRecoveryCodes(app, em, currentCaller(ctx).id, body.totp_code));
  },
});

export const jwksRoute = defineRoute({
  method: 'get', path: '/.well-known/jwks.json', tags, access: 'public',
  summary: 'Public keys that verify access tokens',
  responses: { 200: z.object({ keys: z.array(z.record(z.string(), z.unknown())) }) },
  async handler({ app, ctx }) {
    ctx.set('cache-control', 'public, max-age=300');
    return reply.bare(app.tokens.jwks());
  },
});

export const authRoutes = [
  registerRoute, loginRoute, refreshRoute, logoutRoute, forgotPasswordRoute, resetPasswordRoute,
  verifyEmailRoute, resendVerificationRoute, listSessionsRoute, revokeSessionRoute,
  mfaSetupRoute, mfaVerifyRoute, mfaDisableRoute, readRecoveryCodesRoute, regenerateRecoveryCodesRoute, jwksRoute,
];
