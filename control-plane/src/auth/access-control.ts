// The one guard every route goes through (router.ts calls it from each
// route's declared AccessRule). Authentication: a JWT access token (checked
// for revocation on every request) or a machine API token (`cdn_...`, resolved
// by the CDN administration module). Authorization: the rule's permission evaluated against
// the caller's stored roles, exact → type-scoped → global.
import { pendingDeletionSql } from '../accounts/index.ts';
import type { Actor, RequestContext } from '../core/request-context.ts';
import type { Database } from '../db/orm.ts';
import { ApiError } from '../http/errors.ts';
import type { AccessRule, RouteInput } from '../http/route.ts';
import type { AccessControl } from '../http/services.ts';
import { matchPermission, type PermissionGrant } from '../permissions/catalog.ts';
import { loadRoleGrants } from './permissions/permission-service.ts';
import { API_TOKEN_PREFIX } from '../tokens/opaque-tokens.ts';
import { TokenVerificationError } from './primitives/signing-keys.ts';
import type { SessionActivity } from './session-activity.ts';
import type { TokenService } from './token-service.ts';

/**
 * Resolves a machine API token to its caller (the CDN administration module provides one as a service). It takes
 * no entity manager: a request's is forked on first use, and a token-authenticated read never needs one.
 */
export type ApiTokenResolver = (token: string) => Promise<(Actor & { type: 'api_token' }) | null>;

/** Where the guard finds the resolver: the composition root's services, filled by a capability started after auth. */
export interface ApiTokenResolverSource {
  resolveApiToken?: ApiTokenResolver;
}

export function bearerToken(authorization: string): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1];
}

/** The authenticated actor of a request (routes with an access rule other than public always have one). */
export function requireActor(rc: RequestContext): Actor {
  if (!rc.actor) throw new ApiError('UNAUTHORIZED');
  return rc.actor;
}

/** Owners act on their own resources; holders of the permission globally act on anyone's (document 1 §4.0.6). */
export function assertOwnerOrGlobal(rc: RequestContext, ownerId: string): void {
  const actor = requireActor(rc);
  if (actor.type === 'user' && actor.id === ownerId) return;
  if (rc.access === 'global') return;
  throw new ApiError('FORBIDDEN', 'You can only act on your own resources');
}

/** The caller's user row, with the roles and grants it holds now (role, permission, resource type, resource id). */
type UserAccessRow = Record<string, unknown> & { status: string; deletion_pending: boolean; access: [string, string | null, string | null, string | null][] };

// One round trip: the user's row (kept on the actor, so a route reading the
// caller's own record needs no second query), whether the account is
// scheduled for deletion (an index lookup) and, folded into one JSON
// column, every unexpired role with the permissions it carries.
const USER_ACCESS_SQL = `
  select u.*, ${pendingDeletionSql('u')} as deletion_pending, coalesce((
    select json_agg(json_build_array(ur.role_name, rp.permission, rp.resource_type, rp.resource_id))
      from user_role ur left join role_permission rp on rp.role_name = ur.role_name
     where ur.user_id = u.id and (ur.expires_at is null or ur.expires_at > now())
  ), '[]'::json) as access
  from app_user u where u.id = ?`;

export class TokenAccessControl implements AccessControl {
  readonly #tokens: TokenService;
  readonly #db: Database;
  readonly #apiTokens: ApiTokenResolverSource;
  readonly #markActive: SessionActivity | undefined;

  constructor(tokens: TokenService, db: Database, apiTokens: ApiTokenResolverSource = {}, markActive?: SessionActivity) {
    this.#tokens = tokens;
    this.#db = db;
    this.#apiTokens = apiTokens;
    this.#markActive = markActive;
  }

  async authenticate(rc: RequestContext, authorization: string, rule: AccessRule): Promise<void> {
    const token = authorization === '' ? undefined : bearerToken(authorization);
    if (!token) {
      if (rule === 'public') return;
      throw new ApiError('UNAUTHORIZED', 'Access token missing');
    }
    try {
      rc.actor = await this.#resolve(token);
    } catch (error) {
      // A bad token on a public route is ignored rather than refused.
      if (rule === 'public') return;
      throw error;
    }
  }

  async #resolve(token: string): Promise<Actor> {
    if (token.startsWith(API_TOKEN_PREFIX)) {
      const resolve = this.#apiTokens.resolveApiToken;
      const caller = resolve ? await resolve(token) : null;
      if (!caller) throw new ApiError('UNAUTHORIZED', 'API token invalid or revoked');
      return caller;
    }
    try {
      const claims = await this.#tokens.verifyAccessToken(token);
      // The session is in use: its last_active_at moves (at most once a minute).
      if (claims.sid) await this.#markActive?.(claims.sid);
      return { type: 'user', id: claims.sub, roles: claims.roles, sessionId: claims.sid, tokenId: claims.jti, tokenExpiresAt: claims.exp };
    } catch (error) {
      if (error instanceof TokenVerificationError) {
        throw new ApiError('UNAUTHORIZED', error.reason === 'expired' ? 'Access token expired' : 'Access token missing or invalid');
      }
      throw error;
    }
  }

  async authorize(rc: RequestContext, rule: AccessRule, input: RouteInput): Promise<void> {
    if (typeof rule !== 'object') return;
    const caller = requireActor(rc);
    let grants: PermissionGrant[];
    if (caller.type === 'api_token') {
      // Machine tokens act on the CDN interface only: the CDN admin role is also the platform's
      // admin role, and a CI credential must not administer subscribers' accounts.
      if (!rule.permission.startsWith('cdn.')) throw new ApiError('FORBIDDEN', 'API tokens may only call the CDN interface');
      grants = caller.grants ?? await loadRoleGrants(rc.em, caller.roles);
    } else {
      // Status and grants read on every request: the caller is judged on stored data, not on the token.
      // Straight on the pool: a read outside any unit of work needs no forked entity manager.
      const [row] = await this.#db.orm.em.getConnection().execute<UserAccessRow[]>(USER_ACCESS_SQL, [caller.id]);
      if (!row || row.status === 'deleted' || row.status === 'suspended') throw new ApiError('UNAUTHORIZED', 'Account is not active');
      if (row.status === 'pending_verification' && !rule.allowUnverified) {
        throw new ApiError('EMAIL_NOT_VERIFIED', 'Verify your e-mail address first');
      }
      // During the grace period of a deletion the owner may read the account, cancel the deletion and export their data.
      if (row.deletion_pending && !rule.allowPendingDeletion) {
        throw new ApiError('ACCOUNT_PENDING_DELETION', 'This account is scheduled for deletion; cancel the deletion (DELETE /v1/users/me/deletion-request) to use it again');
      }
      const { access, deletion_pending: _pending, ...record } = row;
      caller.record = record;
      caller.roles = [...new Set(access.map(([role]) => role))].sort();
      grants = access.filter(([, permission]) => permission !== null).map(([, permission, resource_type, resource_id]) => ({ permission: permission!, resource_type, resource_id }));
    }
    const tier = matchPermission(grants, {
      permission: rule.permission,
      resourceType: rule.resourceType,
      resourceId: rule.resourceId?.(input),
    });
    if (!tier) throw new ApiError('FORBIDDEN');
    // The first match only decides that the call is allowed. Ownership checks ask whether the caller
    // holds the permission globally: an administrator who is also a subscriber matches the
    // subscriber's type-scoped grant first, yet may act on anyone's resources (document 1 §4.0.6).
    rc.access = tier !== 'global' && matchPermission(grants, { permission: rule.permission }) === 'global' ? 'global' : tier;
  }
}
