// The one guard every route goes through (router.ts calls it from each
// route's declared AccessRule). Authentication: a JWT access token (checked
// for revocation on every request) or a machine API token (`cdn_...`, resolved
// by the CDN module). Authorization: the rule's permission evaluated against
// the caller's stored roles, exact → type-scoped → global.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Actor, RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import type { AccessRule, RouteInput } from '../http/route.ts';
import type { AccessControl } from '../http/services.ts';
import { matchPermission, type PermissionGrant } from '../permissions/catalog.ts';
import { loadRoleGrants } from './permissions/permission-service.ts';
import { API_TOKEN_PREFIX } from './primitives/opaque-tokens.ts';
import { TokenVerificationError } from './primitives/signing-keys.ts';
import type { TokenService } from './token-service.ts';

/** Resolves a machine API token to its caller (the CDN module registers one). */
export type ApiTokenResolver = (em: EntityManager, token: string) => Promise<(Actor & { type: 'api_token' }) | null>;

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

interface UserAccessRow {
  status: string;
  role_name: string | null;
  permission: string | null;
  resource_type: string | null;
  resource_id: string | null;
}

export class TokenAccessControl implements AccessControl {
  readonly #tokens: TokenService;
  apiTokenResolver?: ApiTokenResolver;

  constructor(tokens: TokenService) {
    this.#tokens = tokens;
  }

  async authenticate(rc: RequestContext, authorization: string, rule: AccessRule): Promise<void> {
    const token = authorization === '' ? undefined : bearerToken(authorization);
    if (!token) {
      if (rule === 'public') return;
      throw new ApiError('UNAUTHORIZED', 'Access token missing');
    }
    try {
      rc.actor = await this.#resolve(rc, token);
    } catch (error) {
      // A bad token on a public route is ignored rather than refused.
      if (rule === 'public') return;
      throw error;
    }
  }

  async #resolve(rc: RequestContext, token: string): Promise<Actor> {
    if (token.startsWith(API_TOKEN_PREFIX)) {
      const caller = this.apiTokenResolver ? await this.apiTokenResolver(rc.em, token) : null;
      if (!caller) throw new ApiError('UNAUTHORIZED', 'API token invalid or revoked');
      return caller;
    }
    try {
      const claims = await this.#tokens.verifyAccessToken(token);
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
    const em = rc.em;
    let grants: PermissionGrant[];
    if (caller.type === 'api_token') {
      grants = await loadRoleGrants(em, caller.roles);
    } else {
      // Status and grants in one query: every request is judged on stored data, not on the token.
      const rows = await em.execute<UserAccessRow[]>(
        `select u.status, ur.role_name, rp.permission, rp.resource_type, rp.resource_id
           from app_user u
           left join user_role ur on ur.user_id = u.id and (ur.expires_at is null or ur.expires_at > now())
           left join role_permission rp on rp.role_name = ur.role_name
          where u.id = ?`,
        [caller.id],
      );
      const user = rows[0];
      if (!user || user.status === 'deleted' || user.status === 'suspended') throw new ApiError('UNAUTHORIZED', 'Account is not active');
      if (user.status === 'pending_verification' && !rule.allowUnverified) {
        throw new ApiError('EMAIL_NOT_VERIFIED', 'Verify your e-mail address first');
      }
      caller.roles = [...new Set(rows.map((r) => r.role_name).filter((r): r is string => r !== null))].sort();
      grants = rows.filter((r) => r.permission !== null).map((r) => ({ permission: r.permission!, resource_type: r.resource_type, resource_id: r.resource_id }));
    }
    const tier = matchPermission(grants, {
      permission: rule.permission,
      resourceType: rule.resourceType,
      resourceId: rule.resourceId?.(input),
    });
    if (!tier) throw new ApiError('FORBIDDEN');
    rc.access = tier;
  }
}
