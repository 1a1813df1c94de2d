// Access, step-up, profile and ID tokens: signing keys persisted (sealed) in the
// database and shared by every replica, and revocation checked on every
// request through the store, so a logout, session revocation or suspension
// takes effect at once rather than at expiry.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { KeyValueStore } from '../store/index.ts';
import { JwtSigningKey } from './auth.entities.ts';
import { RevocationList } from './revocation-list.ts';
import { KeyRing, TokenVerificationError, type AccessTokenClaims, type StoredSigningKey } from './primitives/signing-keys.ts';

export const ACCESS_TOKEN_TTL_SECONDS = 900;
export const STEP_UP_TOKEN_TTL_SECONDS = 300;
export const PROFILE_TOKEN_TTL_SECONDS = 3600;
const STEP_UP_TYP = 'step-up+jwt';
const PROFILE_TYP = 'profile+jwt';
const ID_TOKEN_TYP = 'JWT';
// Revocation entries only need to outlive the longest access token.
const REVOCATION_TTL_MS = (ACCESS_TOKEN_TTL_SECONDS + 60) * 1000;
// An unknown kid triggers a reload from the database at most this often (another replica rotated).
const RELOAD_INTERVAL_MS = 5000;

export const ACCESS_TOKEN_SCOPE = 'openid profile content:read subscription:read watchlist devices drm';

export interface AccessTokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

export interface VerifiedAccessToken extends AccessTokenClaims {
  sid: string;
  roles: string[];
}

export class TokenService {
  #ring: KeyRing;
  readonly #revocations: RevocationList;
  readonly #box: SecretBox;
  readonly #loadKeys: () => Promise<KeyRing>;
  #lastReload = 0;

  private constructor(ring: KeyRing, revocations: RevocationList, box: SecretBox, loadKeys: () => Promise<KeyRing>) {
    this.#ring = ring;
    this.#revocations = revocations;
    this.#box = box;
    this.#loadKeys = loadKeys;
  }

  /** Loads the signing keys from the database, creating the first one when there is none. */
  static async create(options: { em: EntityManager; store: KeyValueStore; box: SecretBox; issuer: string; now?: () => number }): Promise<TokenService> {
    const ringOptions = { issuer: options.issuer, audience: options.issuer, clockToleranceSeconds: 5, now: options.now };
    const load = async (): Promise<KeyRing> => {
      const em = options.em.fork();
      const rows = await em.find(JwtSigningKey, { status: { $ne: 'retired' } }, { orderBy: { created_at: 'desc' } });
      const stored = rows.map((row) => JSON.parse(options.box.openString(row.sealed_key, row.kid)) as StoredSigningKey);
      return KeyRing.import(stored, ringOptions);
    };
    let ring = await load();
    if (!ring.keys().some((k) => k.status === 'active')) {
      const fresh = await KeyRing.generate(ringOptions);
      await persistKeys(options.em.fork(), options.box, fresh);
      ring = await load(); // another replica may have created one at the same time: use what is stored
    }
    return new TokenService(ring, await RevocationList.start(options.store), options.box, load);
  }

  jwks() {
    return this.#ring.jwks();
  }

  /** Adds a new signing key; the previous one keeps verifying until its tokens have expired. */
  async rotateSigningKey(em: EntityManager): Promise<string> {
    const info = await this.#ring.rotate();
    await persistKeys(em, this.#box, this.#ring);
    return info.kid;
  }

  async issueAccessToken(claims: { userId: string; sessionId: string; roles: string[] }): Promise<AccessTokenResponse> {
    const access_token = await this.#ring.sign({ sub: claims.userId, sid: claims.sessionId, roles: claims.roles }, { expiresInSeconds: ACCESS_TOKEN_TTL_SECONDS });
    return { access_token, token_type: 'Bearer', expires_in: ACCESS_TOKEN_TTL_SECONDS };
  }

  async issueStepUpToken(userId: string, sessionId: string): Promise<{ step_up_token: string; expires_in: number }> {
    const step_up_token = await this.#ring.sign({ sub: userId, sid: sessionId }, { expiresInSeconds: STEP_UP_TOKEN_TTL_SECONDS, typ: STEP_UP_TYP });
    return { step_up_token, expires_in: STEP_UP_TOKEN_TTL_SECONDS };
  }

  async issueProfileToken(claims: { userId: string; sessionId: string; profileId: string; pinFingerprint: string }): Promise<{ profile_token: string; expires_in: number }> {
    const profile_token = await this.#ring.sign(
      { sub: claims.userId, sid: claims.sessionId, profile_id: claims.profileId, pin_fp: claims.pinFingerprint },
      { expiresInSeconds: PROFILE_TOKEN_TTL_SECONDS, typ: PROFILE_TYP },
    );
    return { profile_token, expires_in: PROFILE_TOKEN_TTL_SECONDS };
  }

  /**
   * A profile token proves the PIN of one profile in one session: refused for
   * another profile, another user or another session, once the profile's PIN
   * has changed, once that session is revoked, and after its 3600 s. (It is always presented beside an access
   * token of its session, which is checked too, so the session's revocation
   * entry outliving access tokens only is enough.)
   */
  async verifyProfileToken(token: string, expected: { userId: string; sessionId: string | undefined; profileId: string; pinFingerprint: string }): Promise<void> {
    const claims = await this.#verify(token, PROFILE_TYP);
    if (claims.sub !== expected.userId) throw new TokenVerificationError('invalid', 'profile token of another user');
    if (typeof claims.sid !== 'string' || claims.sid !== expected.sessionId) throw new TokenVerificationError('invalid', 'profile token of another session');
    if (claims.profile_id !== expected.profileId) throw new TokenVerificationError('invalid', 'profile token of another profile');
    if (claims.pin_fp !== expected.pinFingerprint) throw new TokenVerificationError('invalid', 'profile token of a former PIN');
    if (await this.#revocations.check([`revoked:sid:${claims.sid}`])) throw new TokenVerificationError('invalid', 'session revoked');
  }

  async issueIdToken(user: { id: string; email: string; email_verified: boolean; display_name?: string | null }): Promise<string> {
    return this.#ring.sign(
      { sub: user.id, email: user.email, email_verified: user.email_verified, name: user.display_name ?? undefined },
      { expiresInSeconds: ACCESS_TOKEN_TTL_SECONDS, typ: ID_TOKEN_TYP },
    );
  }

  /** Signature, expiry and revocation; throws TokenVerificationError. */
  async verifyAccessToken(token: string): Promise<VerifiedAccessToken> {
    const claims = await this.#verify(token);
    if (typeof claims.sid !== 'string') throw new TokenVerificationError('invalid', 'token has no session');
    // Checked on every request; synchronous while the in-memory mirror is trusted.
    const revoked = this.#revocations.check([`revoked:jti:${claims.jti}`, `revoked:sid:${claims.sid}`]);
    if (revoked === true || (revoked !== false && (await revoked))) throw new TokenVerificationError('invalid', 'token revoked');
    return { ...claims, sid: claims.sid, roles: Array.isArray(claims.roles) ? (claims.roles as string[]) : [] };
  }

  /**
   * A step-up token proves a recent second factor in one session: it is
   * refused for another user, for another session of the same user (a token
   * lifted from one device does not elevate another), once that session is
   * revoked, and after its 300 s.
   */
  async verifyStepUpToken(token: string, caller: { userId: string; sessionId: string | undefined }): Promise<void> {
    const claims = await this.#verify(token, STEP_UP_TYP);
    if (claims.sub !== caller.userId) throw new TokenVerificationError('invalid', 'step-up token of another user');
    if (typeof claims.sid !== 'string' || claims.sid !== caller.sessionId) throw new TokenVerificationError('invalid', 'step-up token of another session');
    if (await this.#revocations.check([`revoked:sid:${claims.sid}`])) throw new TokenVerificationError('invalid', 'session revoked');
  }

  async #verify(token: string, typ?: string): Promise<AccessTokenClaims> {
    try {
      return await this.#ring.verify(token, typ ? { typ } : {});
    } catch (error) {
      // A key this replica has not seen yet (rotated elsewhere): reload once and retry.
      if (error instanceof TokenVerificationError && error.reason === 'invalid' && Date.now() - this.#lastReload > RELOAD_INTERVAL_MS && this.#hasUnknownKid(token)) {
        this.#lastReload = Date.now();
        this.#ring = await this.#loadKeys();
        return this.#ring.verify(token, typ ? { typ } : {});
      }
      throw error;
    }
  }

  #hasUnknownKid(token: string): boolean {
    try {
      const header = JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8')) as { kid?: string };
      return typeof header.kid === 'string' && !this.#ring.keys().some((k) => k.kid === header.kid);
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.#revocations.close();
  }

  /** Refuses this access token from now on (logout). */
  async revokeAccessToken(jti: string): Promise<void> {
    await this.#revocations.revoke([`revoked:jti:${jti}`], REVOCATION_TTL_MS);
  }

  /** Refuses every access token of these sessions from now on. */
  async revokeSessionTokens(sessionIds: string[]): Promise<void> {
    await this.#revocations.revoke(sessionIds.map((sid) => `revoked:sid:${sid}`), REVOCATION_TTL_MS);
  }
}

async function persistKeys(em: EntityManager, box: SecretBox, ring: KeyRing): Promise<void> {
  for (const key of await ring.exportPrivate()) {
    const existing = await em.findOne(JwtSigningKey, key.kid);
    const sealed = box.seal(JSON.stringify(key), key.kid);
    if (existing) {
      existing.status = key.status;
      existing.sealed_key = sealed;
    } else {
      em.create(JwtSigningKey, { kid: key.kid, status: key.status, sealed_key: sealed } as never);
    }
  }
  await em.flush();
}

/**
 * The newest signing key as sealed in the database (its kid is the AAD): a secret only the secrets key of
 * this database's control planes opens, which commands run in their own process check theirs against
 * (RunOptions.deploymentSecret). None before a control plane first started on the database.
 */
export async function sealedSigningKey(db: { orm: { em: EntityManager } }): Promise<{ sealed: string; aad: string } | undefined> {
  const row = await db.orm.em.fork().findOne(JwtSigningKey, { status: { $ne: 'retired' } }, { orderBy: { created_at: 'desc' } });
  return row ? { sealed: row.sealed_key, aad: row.kid } : undefined;
}
