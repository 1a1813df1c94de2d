import path from 'node:path';
import type { EntityClass } from '@mikro-orm/core';
import type { Logger } from 'pino';
import { Migrator } from '@mikro-orm/migrations';
import { MikroORM, PostgreSqlDriver } from '@mikro-orm/postgresql';
import { startEmbeddedPostgres, type EmbeddedOptions, type EmbeddedPostgres } from './embedded-postgres.ts';
import { migrationsList } from './migrations/index.ts';
import { GuardedPostgreSqlDriver } from './transaction-guard.ts';

/** Tables without an entity, left out of the schema diff (see schemaGenerator below). */
export const RAW_SQL_TABLES: (string | RegExp)[] = [/^cdn_traffic_/, 'cdn_log_drain_node'];

export interface Database {
  orm: MikroORM;
  /** True when running on the embedded PGlite rather than a PostgreSQL server. */
  embedded: boolean;
  /** The embedded PGlite directory (its owner's lock and command socket derive from it); undefined on PostgreSQL. */
  embeddedDir?: string;
  /** The PostgreSQL server's URL, for connections of their own outside the pool (db/listener.ts); undefined on the embedded database. */
  url?: string;
  /** Round-trip time of `select 1` in milliseconds; throws when the database does not answer. */
  ping(): Promise<number>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  databaseUrl?: string;
  dataDir: string;
  /** The entities to map (the composition root lists the capabilities'); none for migrations alone. */
  entities?: readonly EntityClass<object>[];
  /** Extra entities (tests register fixture entities this way). */
  extraEntities?: EntityClass<object>[];
  migrate?: boolean;
  poolMax?: number;
  /** Receives the migrator's progress lines; silent without one. */
  log?: Logger;
  /** Sees every SQL statement sent, with its parameters (tests count round trips with it; bench/cdn-lists.ts replays them). */
  onQuery?: (sql: string, params: readonly unknown[]) => void;
  /** How to take the embedded directory's lock (who we are, wait or fail when it is held). */
  embeddedOptions?: EmbeddedOptions;
  /** PostgreSQL's application_name for the pool's connections (a control plane names its address: control-plane-presence.ts). */
  applicationName?: string;
  /** Refuse statements beside an open transaction (transaction-guard.ts); default: when NODE_ENV=test. */
  guardTransactions?: boolean;
}

export async function openDatabase(options: OpenDatabaseOptions): Promise<Database> {
  let embedded: EmbeddedPostgres | undefined;
  let url = options.databaseUrl;
  if (!url) {
    embedded = await startEmbeddedPostgres(path.join(options.dataDir, 'pg'), options.embeddedOptions);
    url = embedded.url;
  }
  let orm: MikroORM;
  try {
    orm = await MikroORM.init({
      driver: (options.guardTransactions ?? process.env.NODE_ENV === 'test') ? GuardedPostgreSqlDriver : PostgreSqlDriver,
      clientUrl: url,
      entities: [...(options.entities ?? []), ...(options.extraEntities ?? [])],
      discovery: { warnWhenNoEntities: false },
      extensions: [Migrator],
      // Migrations are hand-written: no schema snapshot files next to them.
      migrations: { migrationsList, transactional: true, allOrNothing: true, snapshot: false, snapshotOnMigrate: false },
      // Triggers are hand-written in migrations (e.g. 0021's configuration revision): the schema diff leaves them alone.
      // Tables only raw SQL touches, with no entity: traffic analytics (time-partitioned, their partitions made at run
      // time) and each node's log drain delivery. Their migrations are their definition (a test checks them apart).
      schemaGenerator: { ignoreTriggers: true, skipTables: RAW_SQL_TABLES },
      pool: embedded ? { min: 0, max: 1 } : { min: 0, max: options.poolMax ?? 10 },
      ...(options.applicationName && !embedded ? { driverOptions: { application_name: options.applicationName } } : {}),
      forceUtcTimezone: true,
      ...(options.onQuery ? { onQuery: (sql: string, params: readonly unknown[]) => (options.onQuery!(sql, params), sql) } : {}),
      // Each request forks its own context (http/request-context.ts); the global one is a bug.
      allowGlobalContext: false,
      debug: false,
      logger: (message: string) => options.log?.info(message.replace(/\u001b\[[0-9;]*m/g, '')),
    });
  } catch (error) {
    await embedded?.close();
    throw error;
  }
  if (options.migrate !== false) {
    try {
      await orm.migrator.up();
    } catch (error) {
      await orm.close(true);
      await embedded?.close();
      throw error;
    }
  }
  return {
    orm,
    embedded: Boolean(embedded),
    embeddedDir: embedded?.dir,
    url: embedded ? undefined : url,
    async ping() {
      const started = performance.now();
      await orm.em.fork().getConnection().execute('select 1');
      return performance.now() - started;
    },
    async close() {
      await orm.close(true);
      await embedded?.close();
    },
  };
}
