// CDN API tokens (document 3 §2, §3, §4.11): create (the value shown once),
// list, read, revoke and rotate, each audit-logged without the value; and the
// resolver the guard calls for `Authorization: Bearer cdn_...`.
//
// Values are `cdn_` + 256 random bits; only HMAC-SHA256 under the token pepper
// is stored, so the guard finds a token by the hash of what it was given (an
// index look-up on a keyed hash reveals nothing through timing: the caller
// cannot steer the hash) and a table dump gives no usable token.
import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import type { ApiTokenResolver } from '../auth/index.ts';
import { createTokenHasher, generateApiToken, isApiTokenFormat } from '../tokens/opaque-tokens.ts';
import { MINUTE } from '../core/clock.ts';
import type { CoreServices } from '../core/services.ts';
import { matchPermission, type Permission, type PermissionGrant } from '../permissions/catalog.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { ApiTokenCache } from './api-token-cache.ts';
import { issuedTokens, type MintedToken, type WithValue } from '../tokens/issued-tokens.ts';
import { ApiToken, type ApiTokenRole } from './api-token.entity.ts';
import { responsibleUserId } from '../tokens/actor.ts';

/** `last_used_at` is written at most this often per token (a Redis key marks the minute), not on every request. */
export const LAST_USED_RESOLUTION_MS = MINUTE;

export interface CreateApiTokenInput {
  name: string;
  role: ApiTokenRole;
  expires_at?: Date | null;
}

/** A token record with its value, as create and rotate answer it once. */
export type IssuedApiToken = WithValue<ApiToken>;

const apiTokens = issuedTokens({ entity: ApiToken, label: 'API token', resourceType: 'api_token', audited: ['name', 'role', 'status', 'expires_at'] });

/** A fresh value and its keyed hash. */
function mint(app: CoreServices): MintedToken {
  const value = generateApiToken();
  return { value, columns: { token_hash: createTokenHasher(app.tokenPepper).hash(value) } };
}

export async function findApiToken(em: EntityManager, id: string): Promise<ApiToken> {
  return apiTokens.find(em, id);
}

export async function createApiToken(app: CoreServices, rc: RequestContext, input: CreateApiTokenInput): Promise<IssuedApiToken> {
  return apiTokens.create(rc, app.clock.now(), mint(app), {
    name: input.name, role: input.role, expires_at: input.expires_at ?? null, created_by: responsibleUserId(rc),
  });
}

/** Revoked at once and for good: every replica drops the token from its cache when the revocation commits (api-token-cache.ts). */
export async function revokeApiToken(rc: RequestContext, id: string): Promise<ApiToken> {
  return apiTokens.revoke(rc, id, new Date());
}

/**
 * Atomic rotation (document 3 §3): the old token is revoked and a new one
 * issued with the same name, role and expiry, in one transaction; the old
 * value stops working at the commit (no grace period). The old record names
 * its successor in `replaced_by`.
 */
export async function rotateApiToken(app: CoreServices, rc: RequestContext, id: string): Promise<IssuedApiToken> {
  return apiTokens.rotate(rc, id, app.clock.now(), mint(app), (old, tx) => ({
    name: old.name, role: old.role, expires_at: old.expires_at ?? null, created_by: responsibleUserId(tx),
  }));
}

export interface TokenRow {
  id: string;
  role: ApiTokenRole;
  status: string;
  expires_at: Date | string | null;
  created_by: string | null;
  /** The issuing user's account status (null: no issuer recorded, or its row is gone). */
  creator_status: string | null;
  /** The permissions the token's role carries now: [permission, resource_type, resource_id]. */
  grants: [string, string | null, string | null][];
  /** The permissions the issuer's roles carry now, with each role's expiry: [permission, resource_type, resource_id, expires_at]. */
  issuer_grants: [string, string | null, string | null, string | null][];
}

// One round trip: the token, its issuer's status and, folded into JSON columns, the permissions
// of its role and those of its issuer's roles (the guard needs no second read to authorize the call).
// Role expiries are returned rather than filtered, so a cached row is judged again at each use.
const TOKEN_SQL = `
  select t.id, t.role, t.status, t.expires_at, t.created_by, u.status as creator_status, coalesce((
    select json_agg(json_build_array(rp.permission, rp.resource_type, rp.resource_id)) from role_permission rp where rp.role_name = t.role
  ), '[]'::json) as grants, coalesce((
    select json_agg(json_build_array(rp.permission, rp.resource_type, rp.resource_id, ur.expires_at))
      from user_role ur join role_permission rp on rp.role_name = ur.role_name where ur.user_id = t.created_by
  ), '[]'::json) as issuer_grants
  from cdn_api_token t left join app_user u on u.id = t.created_by where t.token_hash = ?`;

/**
 * What a token may do: the permissions of its role that its issuer holds at
 * `now` (a token acts for the person who issued it, so it never does more
 * than they may now: demoting the issuer demotes their tokens, promoting them
 * again restores what the role allows). A token with no recorded issuer may
 * do nothing.
 */
export function effectiveGrants(row: Pick<TokenRow, 'grants' | 'issuer_grants'>, now: Date): PermissionGrant[] {
  const issuer: PermissionGrant[] = row.issuer_grants
    .filter(([, , , expiresAt]) => expiresAt === null || new Date(expiresAt) > now)
    .map(([permission, resource_type, resource_id]) => ({ permission, resource_type, resource_id }));
  return row.grants
    .map(([permission, resource_type, resource_id]) => ({ permission, resource_type, resource_id }))
    .filter((grant) => matchPermission(issuer, {
      permission: grant.permission as Permission, resourceType: grant.resource_type ?? undefined, resourceId: grant.resource_id ?? undefined,
    }) !== null);
}

/**
 * effectiveGrants of a row, kept with the row until the first of its issuer's grants that counted expires (a row
 * read again, or dropped from the cache, is another object: its grants are worked out afresh). A token used many
 * times a second is not re-judged grant by grant on every call.
 */
const grantsOfRow = new WeakMap<object, { grants: PermissionGrant[]; until: number }>();

function rowGrants(row: TokenRow, now: Date): PermissionGrant[] {
  const at = now.getTime();
  const kept = grantsOfRow.get(row);
  if (kept && at < kept.until) return kept.grants;
  let until = Infinity;
  for (const [, , , expiresAt] of row.issuer_grants) {
    const expires = expiresAt === null ? Infinity : new Date(expiresAt).getTime();
    if (expires > at && expires < until) until = expires;
  }
  const grants = effectiveGrants(row, now);
  grantsOfRow.set(row, { grants, until });
  return grants;
}

/**
 * The guard's resolver. A token this replica resolved lately is taken from
 * the cache (api-token-cache.ts: dropped on every replica when a token, its
 * issuer's status or a role's permissions change, and off while that cannot
 * be heard); otherwise one indexed statement on the pool. Status, expiry and
 * issuer are judged on every call. `last_used_at` is written at most once per
 * token and minute: a Redis key set only if absent elects the one request
 * that writes it, and a replica that has seen the token within the minute
 * does not ask again. Unknown, malformed, revoked, expired tokens and tokens
 * whose issuer is deactivated are all null (401); unknown ones are not cached.
 * The token's permissions are those of its role its issuer still holds
 * (effectiveGrants); a change of the issuer's roles drops the cached rows
 * everywhere (migration 0027).
 */
export function apiTokenResolver(app: CoreServices, cache?: ApiTokenCache<TokenRow>): ApiTokenResolver {
  const hasher = createTokenHasher(app.tokenPepper);
  const seenRecently = new LRUCache<string, true>({ max: 10_000, ttl: LAST_USED_RESOLUTION_MS });
  return async (presented) => {
    if (!isApiTokenFormat(presented)) return null;
    const connection = app.db.orm.em.getConnection();
    // Keyed by the value itself, as verified access tokens are: a call with a cached token skips the HMAC too.
    let row = cache?.get(presented);
    if (!row) {
      const generation = cache?.generation ?? 0;
      [row] = await connection.execute<TokenRow[]>(TOKEN_SQL, [hasher.hash(presented)]);
      if (!row) return null;
      cache?.remember(presented, row, generation);
    }
    const now = app.clock.now();
    if (row.status !== 'active' || (row.expires_at !== null && new Date(row.expires_at) <= now)) return null;
    // A token acts for the admin who issued it: while that admin is deactivated (suspended) or erased, it is refused too.
    if (row.creator_status === 'suspended' || row.creator_status === 'deleted') return null;
    if (!seenRecently.has(row.id)) {
      seenRecently.set(row.id, true);
      if (await app.store.set(`cdn-token-used:${row.id}`, '1', { ttlMs: LAST_USED_RESOLUTION_MS, onlyIfAbsent: true })) {
        // The version moves with it, so a cached ETag of the record does not hide the new time.
        await connection.execute(`update cdn_api_token set last_used_at = ?, version = version + 1 where id = ? and status = 'active'`, [now, row.id]);
      }
    }
    return { type: 'api_token', id: row.id, roles: [row.role], grants: rowGrants(row, now), record: { created_by: row.created_by } };
  };
}
