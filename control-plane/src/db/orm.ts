import path from 'node:path';
import type { EntityClass } from '@mikro-orm/core';
import type { Logger } from 'pino';
import { Migrator } from '@mikro-orm/migrations';
import { MikroORM, PostgreSqlDriver } from '@mikro-orm/postgresql';
import { startEmbeddedPostgres, type EmbeddedOptions, type EmbeddedPostgres } from './embedded-postgres.ts';
import { entities as allEntities } from './entities.ts';
import { migrationsList } from './migrations/index.ts';

export interface Database {
  orm: MikroORM;
  /** True when running on the embedded PGlite rather than a PostgreSQL server. */
  embedded: boolean;
  /** The embedded PGlite directory (its owner's lock and command socket derive from it); undefined on PostgreSQL. */
  embeddedDir?: string;
  /** Round-trip time of `select 1` in milliseconds; throws when the database does not answer. */
  ping(): Promise<number>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  databaseUrl?: string;
  dataDir: string;
  /** Extra entities (tests register fixture entities this way). */
  extraEntities?: EntityClass<object>[];
  migrate?: boolean;
  poolMax?: number;
  /** Receives the migrator's progress lines; silent without one. */
  log?: Logger;
  /** How to take the embedded directory's lock (who we are, wait or fail when it is held). */
  embeddedOptions?: EmbeddedOptions;
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
      driver: PostgreSqlDriver,
      clientUrl: url,
      entities: [...allEntities, ...(options.extraEntities ?? [])],
      extensions: [Migrator],
      // Migrations are hand-written: no schema snapshot files next to them.
      migrations: { migrationsList, transactional: true, allOrNothing: true, snapshot: false, snapshotOnMigrate: false },
      pool: embedded ? { min: 0, max: 1 } : { min: 0, max: options.poolMax ?? 10 },
      forceUtcTimezone: true,
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
