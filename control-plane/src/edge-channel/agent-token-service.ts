// Edge agent tokens (DESIGN.md §7): issue (the value shown once), list,
// read, revoke and rotate, each audit-logged without the value; the verifier
// the control channel calls when an agent opens its stream; and the
// announcements that make a revocation (or an expiry) close the token's open
// streams on every replica at once.
//
// Modelled on the CDN API tokens (cdn-admin/api-token-service.ts): values are
// `agt_` + 256 random bits and only HMAC-SHA256 under the token pepper is
// stored, so the verifier finds a token by the hash of what it was given (an
// index look-up on a keyed hash reveals nothing through timing) and a table
// dump gives no usable token.
import type { EntityManager } from '@mikro-orm/postgresql';
import { createTokenHasher, generateAgentToken, isAgentTokenFormat, redactToken } from '../tokens/opaque-tokens.ts';
import { responsibleUserId } from '../tokens/actor.ts';
import { MINUTE, type Clock } from '../core/clock.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { CoreServices } from '../core/services.ts';
import { issuedTokens, type MintedToken, type WithValue } from '../tokens/issued-tokens.ts';
import type { KeyValueStore } from '../store/index.ts';
import { AgentToken } from './agent-token.entity.ts';
import type { CreateAgentTokenInput } from './agent-token-record.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL, type AgentTokenVerifier } from './contracts.ts';

/** What the token operations need: the pepper to hash values, the clock for expiries, the store to tell every replica of a revocation. */
export interface AgentTokenDeps {
  tokenPepper: Buffer;
  clock: Clock;
  store: Pick<KeyValueStore, 'publish'>;
}

/** A token record with its value, as create and rotate answer it once. */
export type IssuedAgentToken = WithValue<AgentToken>;

const agentTokens = issuedTokens({ entity: AgentToken, label: 'agent token', resourceType: 'agent_token', audited: ['name', 'description', 'status', 'expires_at'] });

/** A fresh value, its keyed hash and its hint. */
function mint(deps: AgentTokenDeps): MintedToken {
  const value = generateAgentToken();
  return { value, columns: { token_hash: createTokenHasher(deps.tokenPepper).hash(value), token_hint: redactToken(value) } };
}

export async function findAgentToken(em: EntityManager, id: string): Promise<AgentToken> {
  return agentTokens.find(em, id);
}

export async function createAgentToken(deps: AgentTokenDeps, rc: RequestContext, input: CreateAgentTokenInput): Promise<IssuedAgentToken> {
  return agentTokens.create(rc, deps.clock.now(), mint(deps), {
    name: input.name, description: input.description ?? null, expires_at: input.expires_at ?? null, created_by: responsibleUserId(rc),
  });
}

/**
 * Tells every replica (Redis pub/sub; in-process without Redis) to close the
 * token's streams now. The revocation is already stored when this runs, so a
 * store that fails is logged, not thrown: the token stays refused on every
 * new stream, and the channel re-checks its streams when its subscription
 * comes back.
 */
export async function announceRevocation(deps: AgentTokenDeps, rc: RequestContext, id: string): Promise<boolean> {
  try {
    await deps.store.publish(AGENT_TOKEN_REVOKED_CHANNEL, JSON.stringify({ id }));
    return true;
  } catch (error) {
    rc.log.error({ err: error, agent_token_id: id }, 'could not announce an agent token revocation; open streams with it close when their agents reconnect');
    return false;
  }
}

/**
 * Revoked at once and for good: the revocation commits, then every replica is
 * told to close the token's open streams. The verifier reads the status on
 * every stream open, so no new stream gets through after the commit.
 */
export async function revokeAgentToken(deps: AgentTokenDeps, rc: RequestContext, id: string): Promise<AgentToken> {
  const token = await agentTokens.revoke(rc, id, deps.clock.now());
  await announceRevocation(deps, rc, token.id);
  return token;
}

/**
 * Atomic rotation, as for API tokens: the old token is revoked and a new one
 * issued with the same name, description and expiry, in one transaction; the
 * old value stops working at the commit (no grace period: the agent's stream
 * closes and it connects again once given the new value). The old record
 * names its successor in `replaced_by`.
 */
export async function rotateAgentToken(deps: AgentTokenDeps, rc: RequestContext, id: string): Promise<IssuedAgentToken> {
  const issued = await agentTokens.rotate(rc, id, deps.clock.now(), mint(deps), (old, tx) => ({
    name: old.name, description: old.description ?? null, expires_at: old.expires_at ?? null, created_by: responsibleUserId(tx),
  }));
  await announceRevocation(deps, rc, id);
  return issued;
}

/** `last_used_at` is written at most once per token and this long (streams of one token open by the thousand when agents reconnect). */
export const AGENT_TOKEN_USE_RESOLUTION_MS = MINUTE;

/**
 * The control channel's verifier: one indexed statement per stream open that
 * finds an active, unexpired token by the hash of the value and records the
 * use (`last_used_at`, at most once a minute: a thousand agents reconnecting
 * with one token used to queue on its row, each open waiting for the one
 * before it to commit its write). No cache, so a revocation refuses the next
 * stream at once. Unknown, malformed, revoked and expired tokens are all null.
 * The value is never logged; a database failure throws (the channel answers
 * UNAVAILABLE, not UNAUTHENTICATED).
 */
export function agentTokenVerifier(app: Pick<CoreServices, 'db' | 'tokenPepper' | 'clock'>): AgentTokenVerifier {
  const hasher = createTokenHasher(app.tokenPepper);
  return {
    async verify(presented) {
      if (typeof presented !== 'string' || !isAgentTokenFormat(presented)) return null;
      const now = app.clock.now();
      const hash = hasher.hash(presented);
      // The token that may open a stream (one statement of the active predicate), and its use recorded only when the
      // last one is over a minute old; the version moves with last_used_at, so a cached ETag does not hide the new time.
      const [row] = await app.db.orm.em.getConnection().execute<{ id: string }[]>(
        `with valid as (
           select id from cdn_agent_token where token_hash = ? and status = 'active' and (expires_at is null or expires_at > ?)
         ),
         used as (
           update cdn_agent_token t set last_used_at = ?, version = t.version + 1
           from valid where t.id = valid.id and (t.last_used_at is null or t.last_used_at <= ?)
         )
         select id from valid`,
        [hash, now, now, new Date(now.getTime() - AGENT_TOKEN_USE_RESOLUTION_MS)]);
      return row ? { id: row.id } : null;
    },
  };
}

const EXPIRY_BATCH = 500;

/**
 * Tells every replica to close the streams of tokens that have expired since
 * the last sweep (the verifier already refuses them on new streams). Each is
 * announced, then marked, so a failed publish is retried by the next run.
 * Returns how many were announced.
 */
export async function announceExpiredAgentTokens(deps: AgentTokenDeps, rc: RequestContext): Promise<number> {
  let announced = 0;
  for (;;) {
    const now = deps.clock.now();
    const rows = await rc.em.execute<{ id: string }[]>(
      `select id from cdn_agent_token
        where status = 'active' and expiry_announced_at is null and expires_at <= ?
        order by expires_at limit ${EXPIRY_BATCH}`, [now]);
    for (const { id } of rows) {
      await deps.store.publish(AGENT_TOKEN_REVOKED_CHANNEL, JSON.stringify({ id }));
      await rc.em.execute(`update cdn_agent_token set expiry_announced_at = ? where id = ? and expiry_announced_at is null`, [now, id]);
      announced++;
    }
    if (rows.length < EXPIRY_BATCH) return announced;
  }
}
