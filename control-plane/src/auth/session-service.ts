// Sessions and their rotating refresh tokens. Each refresh token is single
// use; presenting a spent one means it leaked, so the whole session (the
// token family) is revoked.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RequestContext } from '../core/request-context.ts';
import type { User } from '../accounts/index.ts';
import { ApiError } from '../http/errors.ts';
import { RefreshToken, Session } from './auth.entities.ts';
import { deviceTypeFromUserAgent, maskIp, platformFromUserAgent } from './device.ts';
import { generateRefreshToken, hashToken } from '../tokens/opaque-tokens.ts';
import type { TokenService } from './token-service.ts';

export const SESSION_LIFETIME_MS = 30 * 24 * 60 * 60 * 1000;

export class SessionService {
  readonly #pepper: Buffer;
  readonly #tokens: TokenService;

  constructor(pepper: Buffer, tokens: TokenService) {
    this.#pepper = pepper;
    this.#tokens = tokens;
  }

  hash(token: string): string {
    return hashToken(token, this.#pepper);
  }

  /** A new session for a successful login, with its first refresh token. */
  async start(em: EntityManager, user: User, rc: Pick<RequestContext, 'ip' | 'userAgent'>, device: { device_type?: string; platform?: string } = {}): Promise<{ session: Session; refreshToken: string }> {
    const ua = rc.userAgent;
    const session = em.create(Session, {
      user,
      device_type: device.device_type ?? deviceTypeFromUserAgent(ua),
      platform: device.platform ?? platformFromUserAgent(ua),
      ip_address_hint: maskIp(rc.ip),
      user_agent: ua || null,
      expires_at: new Date(Date.now() + SESSION_LIFETIME_MS),
    } as never);
    const refreshToken = this.#newRefreshToken(em, session);
    await em.flush();
    return { session, refreshToken };
  }

  #newRefreshToken(em: EntityManager, session: Session): string {
    const token = generateRefreshToken();
    em.create(RefreshToken, { session, token_hash: this.hash(token), expires_at: session.expires_at } as never);
    return token;
  }

  /**
   * Spends a refresh token and returns a new one for the same session.
   * Unknown, expired or revoked → 401; already spent → the session is revoked, then 401.
   */
  async rotate(em: EntityManager, presented: string): Promise<{ session: Session; refreshToken: string }> {
    const record = await em.findOne(RefreshToken, { token_hash: this.hash(presented) }, { populate: ['session', 'session.user'] });
    if (!record) throw new ApiError('UNAUTHORIZED', 'Refresh token invalid');
    const session = record.session as unknown as Session;
    if (session.revoked_at || session.expires_at <= new Date() || record.expires_at <= new Date()) {
      throw new ApiError('UNAUTHORIZED', 'Session has ended; log in again');
    }
    // Conditional update: of two concurrent refreshes with one token, exactly one wins.
    const spent = await em.nativeUpdate(RefreshToken, { id: record.id, used_at: null }, { used_at: new Date() });
    if (spent !== 1) {
      await this.revoke(em, [session], 'refresh_token_reuse');
      throw new ApiError('UNAUTHORIZED', 'Refresh token already used; the session has been revoked');
    }
    session.last_active_at = new Date();
    const refreshToken = this.#newRefreshToken(em, session);
    await em.flush();
    return { session, refreshToken };
  }

  /** A new refresh token for a live session; its earlier ones count as spent (presenting one revokes the session). */
  async renew(em: EntityManager, session: Session): Promise<string> {
    await em.nativeUpdate(RefreshToken, { session: session.id, used_at: null }, { used_at: new Date() });
    session.last_active_at = new Date();
    const refreshToken = this.#newRefreshToken(em, session);
    await em.flush();
    return refreshToken;
  }

  /** Ends sessions: no more refreshes, and their access tokens are refused at once. */
  async revoke(em: EntityManager, sessions: Session[], reason: string): Promise<void> {
    const live = sessions.filter((s) => !s.revoked_at);
    if (!live.length) return;
    const now = new Date();
    await em.nativeUpdate(Session, { id: { $in: live.map((s) => s.id) }, revoked_at: null }, { revoked_at: now, revoked_reason: reason });
    for (const s of live) {
      s.revoked_at = now;
      s.revoked_reason = reason;
    }
    await this.#tokens.revokeSessionTokens(live.map((s) => s.id));
  }

  async revokeAll(em: EntityManager, userId: string, reason: string, options: { except?: string } = {}): Promise<number> {
    const sessions = await this.active(em, userId);
    const targets = sessions.filter((s) => s.id !== options.except);
    await this.revoke(em, targets, reason);
    return targets.length;
  }

  async active(em: EntityManager, userId: string): Promise<Session[]> {
    return em.find(Session, { user: userId, revoked_at: null, expires_at: { $gt: new Date() } }, { orderBy: { last_active_at: 'desc' } });
  }
}
