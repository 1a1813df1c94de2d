// The API tokens this replica has resolved, so a call with a known token
// needs no database round trip (the resolver in api-token-service.ts). What a
// resolution reads — the token's status, role, expiry and issuer, the
// issuer's account status and roles, the roles' permissions — is dropped from
// every replica whenever any of it changes:
//   - PostgreSQL notifies channel `api_token_auth` when such a change commits
//     (triggers of migrations 0025 and 0027, whatever wrote it: a route, the
//     CLI, SQL);
//     every replica listens (db/listener.ts) and drops every entry;
//   - on the replica that made the change through the ORM, the entries go at
//     its commit (an ORM subscriber), before the response leaves, so its own
//     caller's next request never races the notification;
//   - while the listener is not live (connecting, lost) nothing is cached or
//     served from the cache: every call reads the database, as without it.
// A resolution that began before a drop is not stored after it (a generation
// count), so a read racing a revocation cannot put the old row back. Entries
// also expire after a minute, and expiry dates are checked on every use.
import type { EntityManager, EventSubscriber, FlushEventArgs, TransactionEventArgs } from '@mikro-orm/core';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { MINUTE } from '../core/clock.ts';
import type { Database } from '../db/orm.ts';
import { listen, type ChannelListener, type ListenerOptions } from '../db/listener.ts';

export const API_TOKEN_AUTH_CHANNEL = 'api_token_auth';
const MAX_ENTRIES = 10_000;
const ENTRY_TTL_MS = MINUTE;

/** Tables whose ORM changes drop the entries on this replica at commit (the triggers cover every writer, a moment later). */
function affectsResolution(changeSet: { meta: { tableName: string }; type: string; payload: Record<string, unknown> }): boolean {
  switch (changeSet.meta.tableName) {
    case 'cdn_api_token':
      return changeSet.type !== 'create';
    case 'app_user':
      return changeSet.type === 'delete' || 'status' in changeSet.payload;
    case 'role':
    case 'role_permission':
    case 'user_role':
      return true;
    default:
      return false;
  }
}

export class ApiTokenCache<Row extends {}> {
  readonly #entries = new LRUCache<string, Row>({ max: MAX_ENTRIES, ttl: ENTRY_TTL_MS });
  #generation = 0;
  #live = false;
  #listener: ChannelListener | undefined;

  /**
   * Listens for changes at the database's URL and drops entries on this replica's ORM commits. On the embedded
   * database (one process, no server to listen to) the cache stays off.
   */
  static async start<Row extends {}>(db: Database, log?: Logger, options: Omit<ListenerOptions, 'log'> = {}): Promise<ApiTokenCache<Row>> {
    const cache = new ApiTokenCache<Row>();
    if (!db.url) return cache;
    db.orm.em.getEventManager().registerSubscriber(cache.#subscriber());
    cache.#listener = await listen(db.url, API_TOKEN_AUTH_CHANNEL, {
      message: () => cache.invalidate(),
      state: (live) => {
        // Changes made while the listener was down were not heard: nothing cached before may be trusted.
        cache.invalidate();
        cache.#live = live;
      },
    }, { ...options, log });
    return cache;
  }

  /** Whether entries are kept and served (the listener is live). */
  get live(): boolean {
    return this.#live;
  }

  /** Counts drops; take it before reading the database and hand it to `remember`. */
  get generation(): number {
    return this.#generation;
  }

  get(key: string): Row | undefined {
    return this.#live ? this.#entries.get(key) : undefined;
  }

  /** Keeps a row read since `generation` was taken, unless entries were dropped meanwhile. */
  remember(key: string, row: Row, generation: number): void {
    if (this.#live && generation === this.#generation) this.#entries.set(key, row);
  }

  /** Drops every entry. */
  invalidate(): void {
    this.#generation++;
    this.#entries.clear();
  }

  async close(): Promise<void> {
    this.#live = false;
    this.invalidate();
    await this.#listener?.close();
  }

  /**
   * Drops the entries when this process commits a change a resolution reads: after a flush that ran in a
   * transaction of its own, or at the commit of the transaction it ran in. (A flush inside a nested
   * transaction drops them when the savepoint is released; the notification follows the outer commit.)
   */
  #subscriber(): EventSubscriber {
    const pending = new WeakSet<object>();
    const flushed = new WeakSet<object>();
    return {
      onFlush: ({ em, uow }: FlushEventArgs) => {
        if (![...uow.getChangeSets()].some((cs) => affectsResolution(cs as never))) return;
        const transaction = (em as EntityManager).getTransactionContext<object>();
        if (transaction) pending.add(transaction);
        else flushed.add(uow);
      },
      afterFlush: ({ uow }: FlushEventArgs) => {
        if (flushed.delete(uow)) this.invalidate();
      },
      afterTransactionCommit: ({ transaction }: TransactionEventArgs) => {
        if (transaction && pending.delete(transaction)) this.invalidate();
      },
    };
  }
}
