// Profile session tokens (document 1 §4.2 verify-pin, part 5.8): a short-lived
// JWT (`typ: profile+jwt`, 3600 s) proving that the caller entered the PIN of
// one profile in one session. Later calls present it as X-Profile-Token;
// requireProfileToken is the one check every route that needs it calls.
import { currentPinFingerprint } from '../accounts/index.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { PROFILE_TOKEN_HEADER } from '../http/headers.ts';
import { requireActor } from './access-control.ts';
import { TokenVerificationError } from './primitives/signing-keys.ts';
import type { AuthServices } from './services.ts';

/** A profile token for one of the caller's profiles (its PIN just checked), bound to the caller's session and that PIN. */
export async function issueProfileToken(app: AuthServices, rc: RequestContext, profile: { id: string; pinFingerprint: string }): Promise<{ profile_token: string; expires_in: number }> {
  const caller = requireActor(rc);
  if (caller.type !== 'user' || !caller.sessionId) throw new ApiError('UNAUTHORIZED');
  return app.tokens.issueProfileToken({ userId: caller.id, sessionId: caller.sessionId, profileId: profile.id, pinFingerprint: profile.pinFingerprint });
}

/**
 * Passes for a profile without a PIN; for a PIN-protected one, 403
 * PROFILE_TOKEN_REQUIRED unless the request's X-Profile-Token is a valid
 * profile token for this profile and its current PIN, issued to the caller in
 * the caller's session (another profile's, another session's, one from
 * before a PIN change, an expired, tampered or revoked-session token, or an
 * access token in its place, are refused). Callers check that the caller may
 * see the profile at all first.
 */
export async function requireProfileToken(app: AuthServices, rc: RequestContext, profileId: string): Promise<void> {
  const caller = requireActor(rc);
  // The request's unit of work usually holds the profile already (no second read).
  const pinFingerprint = await currentPinFingerprint(rc.em, profileId);
  if (pinFingerprint === null) return;
  const token = rc.profileToken;
  if (!token) throw new ApiError('PROFILE_TOKEN_REQUIRED', `This profile is PIN-protected: send the profile token from verify-pin in ${PROFILE_TOKEN_HEADER}`);
  try {
    await app.tokens.verifyProfileToken(token, { userId: caller.id, sessionId: caller.sessionId, profileId, pinFingerprint });
  } catch (error) {
    if (error instanceof TokenVerificationError) throw new ApiError('PROFILE_TOKEN_REQUIRED', 'The profile token is invalid or expired, or was issued for another profile or session');
    throw error;
  }
}
