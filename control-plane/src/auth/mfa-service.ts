// TOTP multi-factor authentication: setup → confirmation (enables MFA and
// returns recovery codes once) → step-up tokens, disable, recovery codes.
import type { EntityManager } from '@mikro-orm/postgresql';
import { User } from '../accounts/index.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { notify } from '../notifications/index.ts';
import { requireActor } from './access-control.ts';
import type { AuthServices as AppServices } from './services.ts';
import { RecoveryCode } from './auth.entities.ts';
import { acceptTotp } from './auth-service.ts';
import { generateRecoveryCodes, hashRecoveryCode } from '../tokens/opaque-tokens.ts';
import { generateTotpSecret, otpauthUri, verifyTotp } from './primitives/totp.ts';

const TOTP_ISSUER = 'Streaming Platform';
const aad = (user: User) => `totp:${user.id}`;
const invalidCode = () => new ApiError('VALIDATION_ERROR', 'Invalid or expired code', { errors: [{ field: 'totp_code', message: 'Invalid or expired code' }] });

export interface RecoveryCodes {
  codes: string[];
  generated_at: Date;
}

/** The calling user, to act on their own MFA settings. */
const callingUser = (rc: RequestContext) => rc.em.findOneOrFail(User, requireActor(rc).id);

export async function setupMfa(app: AppServices, rc: RequestContext): Promise<{ secret: string; otpauth_uri: string }> {
  const em = rc.em;
  const user = await callingUser(rc);
  if (user.mfa_enabled) throw new ApiError('CONFLICT', 'MFA is already enabled; disable it first to set up a new device');
  const secret = generateTotpSecret();
  user.totp_pending_secret_encrypted = app.secretBox.seal(secret, aad(user));
  await em.flush();
  return { secret, otpauth_uri: otpauthUri({ secret, accountName: user.email, issuer: TOTP_ISSUER }) };
}

async function replaceRecoveryCodes(app: AppServices, em: EntityManager, user: User): Promise<RecoveryCodes> {
  await em.nativeDelete(RecoveryCode, { user: user.id });
  const codes = generateRecoveryCodes();
  for (const code of codes) {
    em.create(RecoveryCode, { user, code_hash: hashRecoveryCode(code, app.tokenPepper), hint: code.slice(-2) } as never);
  }
  user.recovery_codes_generated_at = new Date();
  await em.flush();
  return { codes, generated_at: user.recovery_codes_generated_at };
}

/**
 * Verifies a TOTP code. The first successful check of a pending secret
 * enables MFA and also returns the recovery codes (shown this once).
 */
export async function verifyMfa(app: AppServices, rc: RequestContext, code: string) {
  const em = rc.em;
  const sessionId = requireActor(rc).sessionId ?? '';
  const user = await callingUser(rc);
  if (!user.mfa_enabled && user.totp_pending_secret_encrypted) {
    const secret = app.secretBox.openString(user.totp_pending_secret_encrypted, aad(user));
    const match = await verifyTotp(secret, code, { digits: code.length });
    if (!match) throw invalidCode();
    user.totp_secret_encrypted = user.totp_pending_secret_encrypted;
    user.totp_pending_secret_encrypted = null;
    user.totp_last_step = match.timeStep;
    user.mfa_enabled = true;
    // Committed with the change.
    await notify(app, rc, {
      userId: user.id, type: 'mfa_enabled', priority: 'normal',
      title: 'Two-step verification is on',
      body: 'Signing in to your account now needs a code from your authenticator app. Keep your recovery codes somewhere safe. If you did not do this, reset your password at once and contact support.',
    });
    const recovery_codes = await replaceRecoveryCodes(app, em, user);
    return { ...(await app.tokens.issueStepUpToken(user.id, sessionId)), recovery_codes };
  }
  if (!user.mfa_enabled) throw new ApiError('CONFLICT', 'MFA is not set up; call /v1/me/auth/mfa/setup first');
  if (!(await acceptTotp(app, em, user, code))) throw invalidCode();
  return app.tokens.issueStepUpToken(user.id, sessionId);
}

export async function disableMfa(app: AppServices, rc: RequestContext, code: string): Promise<void> {
  const em = rc.em;
  const user = await callingUser(rc);
  if (!user.mfa_enabled) throw new ApiError('CONFLICT', 'MFA is not enabled');
  if (!(await acceptTotp(app, em, user, code))) throw invalidCode();
  user.mfa_enabled = false;
  user.totp_secret_encrypted = null;
  user.totp_pending_secret_encrypted = null;
  user.totp_last_step = null;
  user.recovery_codes_generated_at = null;
  await em.nativeDelete(RecoveryCode, { user: user.id });
  // Committed with the change.
  await notify(app, rc, {
    userId: user.id, type: 'mfa_disabled', priority: 'high',
    title: 'Two-step verification is off',
    body: 'Signing in to your account no longer needs an authenticator code, and every session was signed out. If you did not do this, reset your password at once and contact support.',
  });
  await app.sessions.revokeAll(em, user.id, 'mfa_disabled');
}

/** Plaintext codes exist only at generation; afterwards the unused ones are listed masked. */
export async function listRecoveryCodes(app: AppServices, rc: RequestContext, stepUpToken: string): Promise<RecoveryCodes & { remaining: number }> {
  await requireStepUp(app, rc, stepUpToken);
  const em = rc.em;
  const user = await callingUser(rc);
  if (!user.mfa_enabled) throw new ApiError('CONFLICT', 'MFA is not enabled');
  const codes = await em.find(RecoveryCode, { user: user.id, used_at: null }, { orderBy: { hint: 'asc' } });
  return {
    codes: codes.map((c) => `****-****-${c.hint}`),
    generated_at: user.recovery_codes_generated_at ?? new Date(0),
    remaining: codes.length,
  };
}

export async function regenerateRecoveryCodes(app: AppServices, rc: RequestContext, code: string): Promise<RecoveryCodes> {
  const em = rc.em;
  const user = await callingUser(rc);
  if (!user.mfa_enabled) throw new ApiError('CONFLICT', 'MFA is not enabled');
  if (!(await acceptTotp(app, em, user, code))) throw invalidCode();
  return replaceRecoveryCodes(app, em, user);
}

/** A step-up token obtained by this session within its lifetime (403 STEP_UP_REQUIRED otherwise). */
export async function requireStepUp(app: AppServices, rc: RequestContext, token: string): Promise<void> {
  const caller = requireActor(rc);
  if (!token) throw new ApiError('STEP_UP_REQUIRED', 'A step-up token is required in X-Step-Up-Token');
  try {
    await app.tokens.verifyStepUpToken(token, { userId: caller.id, sessionId: caller.sessionId });
  } catch {
    throw new ApiError('STEP_UP_REQUIRED', 'The step-up token is invalid or expired');
  }
}
