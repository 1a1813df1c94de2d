// CDN API tokens (document 3 §2, §3, §4.11): create (the value shown once),
// list, read, revoke and rotate, each audit-logged without the value; and the
// resolver the guard calls for `Authorization: Bearer cdn_...`.
//
// Values are `cdn_` + 256 random bits; only HMAC-SHA256 under the token pepper
// is stored, so the guard finds a token by the hash of what it was given (an
// index look-up on a keyed hash reveals nothing through timing: the caller
// cannot steer the hash) and a table dump gives no usable token.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { ApiTokenResolver } from '../auth/access-control.ts';
import { createTokenHasher, generateApiToken, isApiTokenFormat } from '../auth/primitives/opaque-tokens.ts';
import { MINUTE } from '../core/clock.ts';
import type { CoreServices } from '../core/services.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, found, validationError } from '../http/errors.ts';
import { ApiToken, type ApiTokenRole } from './api-token.entity.ts';
import { responsibleUserId } from './actor.ts';

/** `last_used_at` is written at most this often per token (a Redis key marks the minute), not on every request. */
export const LAST_USED_RESOLUTION_MS = MINUTE;

export interface CreateApiTokenInput {
  name: string;
  role: ApiTokenRole;
  expires_at?: Date | null;
}

/** A token record with its value, as create and rotate answer it once. */
export type IssuedApiToken = ApiToken & { token: string };

const AUDITED_FIELDS = ['name', 'role', 'status', 'expires_at'] as const;

const snapshot = (token: ApiToken) => Object.fromEntries(AUDITED_FIELDS.map((f) => [f, token[f]]));

export async function findApiToken(em: EntityManager, id: string): Promise<ApiToken> {
  return found(await em.findOne(ApiToken, id), 'API token');
}

/** A new token row for a value (hash only), its value beside it. */
function issue(app: CoreServices, rc: RequestContext, input: { name: string; role: ApiTokenRole; expires_at: Date | null }): IssuedApiToken {
  const value = generateApiToken();
  const token = rc.em.create(ApiToken, {
    name: input.name,
    role: input.role,
    status: 'active',
    token_hash: createTokenHasher(app.tokenPepper).hash(value),
    expires_at: input.expires_at,
    created_by: responsibleUserId(rc),
  } as never);
  // A copy of one shape (not a prototype link) carrying the value for this one answer.
  return { ...token, token: value } as IssuedApiToken;
}

export async function createApiToken(app: CoreServices, rc: RequestContext, input: CreateApiTokenInput): Promise<IssuedApiToken> {
  if (input.expires_at && input.expires_at <= app.clock.now()) throw validationError([{ field: 'expires_at', message: 'Must be in the future' }]);
  const issued = issue(app, rc, { name: input.name, role: input.role, expires_at: input.expires_at ?? null });
  recordAudit(rc, { action: 'api_token.created', resource_type: 'api_token', resource_id: issued.id, changes: changesOf({}, snapshot(issued)) });
  await rc.em.flush();
  return issued;
}

/** The token's row locked for the rest of the transaction: concurrent revokes and rotations of one token run one after the other. */
async function lockedToken(em: EntityManager, id: string): Promise<ApiToken> {
  return found(await em.findOne(ApiToken, id, { lockMode: LockMode.PESSIMISTIC_WRITE }), 'API token');
}

const notActive = () => new ApiError('CONFLICT', 'The API token is revoked; revocation is irreversible');

/** Revoked at once and for good: the guard reads the status on every request, so in-flight use stops with the commit. */
export async function revokeApiToken(rc: RequestContext, id: string): Promise<ApiToken> {
  return inTransaction(rc, async (tx) => {
    const token = await lockedToken(tx.em, id);
    if (token.status !== 'active') throw notActive();
    token.status = 'revoked';
    token.revoked_at = new Date();
    recordAudit(tx, { action: 'api_token.revoked', resource_type: 'api_token', resource_id: token.id, changes: { status: { from: 'active', to: 'revoked' } } });
    await tx.em.flush();
    return token;
  });
}

/**
 * Atomic rotation (document 3 §3): the old token is revoked and a new one
 * issued with the same name, role and expiry, in one transaction; the old
 * value stops working at the commit (no grace period). The old record names
 * its successor in `replaced_by`.
 */
export async function rotateApiToken(app: CoreServices, rc: RequestContext, id: string): Promise<IssuedApiToken> {
  return inTransaction(rc, async (tx) => {
    const old = await lockedToken(tx.em, id);
    if (old.status !== 'active') throw notActive();
    if (old.expires_at && old.expires_at <= app.clock.now()) throw new ApiError('CONFLICT', 'The API token has expired; create a new one');
    const issued = issue(app, tx, { name: old.name, role: old.role, expires_at: old.expires_at ?? null });
    old.status = 'revoked';
    old.revoked_at = new Date();
    old.replaced_by = issued.id;
    recordAudit(tx, {
      action: 'api_token.rotated', resource_type: 'api_token', resource_id: old.id,
      changes: { status: { from: 'active', to: 'revoked' } }, metadata: { replaced_by: issued.id },
    });
    recordAudit(tx, {
      action: 'api_token.created', resource_type: 'api_token', resource_id: issued.id,
      changes: changesOf({}, snapshot(issued)), metadata: { rotated_from: old.id },
    });
    await tx.em.flush();
    return issued;
  });
}

interface TokenRow {
  id: string;
  role: ApiTokenRole;
  status: string;
  expires_at: Date | string | null;
  created_by: string | null;
  /** The issuing user's account status (null: no issuer recorded, or its row is gone). */
  creator_status: string | null;
}

/**
 * The guard's resolver: one indexed statement on the pool per request (no
 * cache, so a revocation applies to the next request), and `last_used_at`
 * written at most once per token and minute: a Redis key set only if absent
 * elects the one request that writes it. Unknown, malformed, revoked,
 * expired tokens and tokens whose issuer is deactivated are all null (401).
 */
export function apiTokenResolver(app: CoreServices): ApiTokenResolver {
  const hasher = createTokenHasher(app.tokenPepper);
  return async (_em, presented) => {
    if (!isApiTokenFormat(presented)) return null;
    const connection = app.db.orm.em.getConnection();
    const [row] = await connection.execute<TokenRow[]>(
      `select t.id, t.role, t.status, t.expires_at, t.created_by, u.status as creator_status
         from cdn_api_token t left join app_user u on u.id = t.created_by where t.token_hash = ?`, [hasher.hash(presented)]);
    const now = app.clock.now();
    if (!row || row.status !== 'active' || (row.expires_at !== null && new Date(row.expires_at) <= now)) return null;
    // A token acts for the admin who issued it: while that admin is deactivated (suspended) or erased, it is refused too.
    if (row.creator_status === 'suspended' || row.creator_status === 'deleted') return null;
    if (await app.store.set(`cdn-token-used:${row.id}`, '1', { ttlMs: LAST_USED_RESOLUTION_MS, onlyIfAbsent: true })) {
      // The version moves with it, so a cached ETag of the record does not hide the new time.
      await connection.execute(`update cdn_api_token set last_used_at = ?, version = version + 1 where id = ? and status = 'active'`, [now, row.id]);
    }
    return { type: 'api_token', id: row.id, roles: [row.role], record: { created_by: row.created_by } };
  };
}
