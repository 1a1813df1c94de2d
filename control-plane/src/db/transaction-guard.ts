// A query beside an open transaction (issue: createDomain hung the embedded database). Inside
// `em.transactional(cb)` every statement must go through the transaction's entity manager (`cb`'s em):
// one sent through another (the request's `rc.em`, a fork, the root em) takes a second pool connection.
// On PostgreSQL that is only a statement outside the transaction; on the embedded database (PGlite, one
// session, a pool of one) it waits for the connection its own transaction holds, forever, and every later
// request waits behind it.
//
// In NODE_ENV=test the control plane's driver is GuardedPostgreSqlDriver: its connection marks the
// asynchronous scope of each open transaction (AsyncLocalStorage), and a statement or a new transaction
// without the transaction's context, issued inside such a scope, throws TransactionGuardError at once,
// on PostgreSQL as on PGlite. Code that deliberately works beside an open transaction (a test that looks
// at committed rows while one is open; never product code on the embedded database) wraps it in
// besideTransaction().
import { AsyncLocalStorage } from 'node:async_hooks';
import type { AnyEntity, Configuration, Connection, Dictionary, EntityData, LoggingOptions, QueryResult, RawQueryFragment, Transaction } from '@mikro-orm/core';
import { PostgreSqlConnection, PostgreSqlDriver, type NativeQueryBuilder } from '@mikro-orm/postgresql';
import type { ControlledTransaction, Kysely } from 'kysely';

/** A statement was sent beside the open transaction instead of through its entity manager. */
export class TransactionGuardError extends Error {
  override name = 'TransactionGuardError';
}

interface Scope { open: boolean }

const openTransaction = new AsyncLocalStorage<Scope | undefined>();

/** Runs `work` outside any open transaction's scope: its statements take a pool connection of their own on purpose. */
export function besideTransaction<T>(work: () => T): T {
  return openTransaction.run(undefined, work);
}

function assertNoOpenTransaction(what: string): void {
  if (!openTransaction.getStore()?.open) return;
  throw new TransactionGuardError(
    `${what} was sent beside an open transaction, on a connection of its own: use the transaction's entity manager ` +
    `(the one em.transactional() passes to its callback); on the embedded database such a statement waits for its own transaction forever`,
  );
}

const describe = (query: unknown) => {
  const text = typeof query === 'string' ? query : String((query as { sql?: string })?.sql ?? 'a query');
  return `the statement "${text.replace(/\s+/g, ' ').slice(0, 120)}"`;
};

export class GuardedPostgreSqlConnection extends PostgreSqlConnection {
  override execute<T extends QueryResult | EntityData<AnyEntity> | EntityData<AnyEntity>[] = EntityData<AnyEntity>[]>(
    query: string | NativeQueryBuilder | RawQueryFragment, params?: readonly unknown[] | Dictionary<unknown>, method?: 'all' | 'get' | 'run',
    ctx?: Transaction, loggerContext?: LoggingOptions,
  ): Promise<T> {
    if (!ctx) assertNoOpenTransaction(describe(query));
    return super.execute<T>(query, params, method, ctx, loggerContext);
  }

  override stream<T extends EntityData<AnyEntity>>(
    query: string | NativeQueryBuilder | RawQueryFragment, params?: readonly unknown[] | Dictionary<unknown>, ctx?: Transaction<Kysely<any>>,
    loggerContext?: LoggingOptions, chunkSize?: number,
  ): AsyncIterableIterator<T> {
    if (!ctx) assertNoOpenTransaction(describe(query));
    return super.stream<T>(query, params, ctx, loggerContext, chunkSize);
  }

  override begin(options?: Parameters<PostgreSqlConnection['begin']>[0]): ReturnType<PostgreSqlConnection['begin']> {
    // A savepoint (options.ctx) belongs to the open transaction; a new transaction takes a connection of its own.
    if (!options?.ctx) assertNoOpenTransaction('a new transaction');
    return super.begin(options);
  }

  override transactional<T>(cb: (trx: Transaction<ControlledTransaction<any, any>>) => Promise<T>, options?: Parameters<PostgreSqlConnection['transactional']>[1]): Promise<T> {
    return super.transactional((trx) => {
      const scope: Scope = { open: true };
      // Work the callback leaves running (timers, unawaited promises) inherits the scope: it closes with the callback.
      return openTransaction.run(scope, async () => {
        try {
          return await cb(trx);
        } finally {
          scope.open = false;
        }
      });
    }, options);
  }
}

/** PostgreSqlDriver whose connection refuses statements beside an open transaction (see above). */
export class GuardedPostgreSqlDriver extends PostgreSqlDriver {
  constructor(config: Configuration) {
    super(config);
    // PostgreSqlDriver fixes its connection class in its constructor; these replace what it made (not yet connected).
    const self = this as unknown as { connection: Connection; replicas: Connection[] };
    self.connection = new GuardedPostgreSqlConnection(this.config);
    self.replicas = this.createReplicas((conf) => new GuardedPostgreSqlConnection(this.config, conf, 'read'));
  }
}
