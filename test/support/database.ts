// One database per test file, so tap's parallel files never collide. On a
// real PostgreSQL: CREATE DATABASE ... TEMPLATE a migrated template made once
// per run (fast). Embedded: a copy of a migrated PGlite data directory.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { EntityClass } from '@mikro-orm/core';
import { startEmbeddedPostgres } from '../../control-plane/src/db/embedded-postgres.ts';
import { entities } from '../../control-plane/src/capabilities.ts';
import { openDatabase, type Database } from '../../control-plane/src/db/orm.ts';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.ts';

export function withDatabaseName(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export async function adminQuery(adminUrl: string, sql: string): Promise<void> {
  // Bounded: a wait on the server (e.g. a lock) fails the test that asked, instead of its whole file at the timeout.
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000, query_timeout: 30_000 });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Creates and migrates a template database; returns its name. */
export async function createTemplateDatabase(adminUrl: string, prefix = 'sp_tpl'): Promise<string> {
  const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  await adminQuery(adminUrl, `create database ${name}`);
  const db = await openDatabase({ databaseUrl: withDatabaseName(adminUrl, name), dataDir: os.tmpdir(), entities, poolMax: 1 });
  await db.close();
  return name;
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await adminQuery(adminUrl, `drop database if exists ${name} with (force)`);
}

/** A migrated PGlite data directory to copy from (embedded mode). */
export async function createTemplateDataDir(): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-pglite-tpl-'));
  const db = await openDatabase({ dataDir: dir, entities });
  await db.close();
  return dir;
}

export interface TestDatabase {
  db: Database;
  /** Whether this is a real PostgreSQL server (false: embedded PGlite). */
  real: boolean;
  /** With `throughProxy`: makes the database unreachable for the app. */
  proxy?: TcpProxy;
  /** Connection URL of this database (for child processes such as CLIs). */
  url: string;
  /** The SQL statements the app sends while `fn` runs (round trips, not timing). */
  statementsDuring(fn: () => Promise<unknown>): Promise<string[]>;
  dispose(): Promise<void>;
}

export async function createTestDatabase(options: {
  postgresUrl?: string;
  extraEntities?: EntityClass<object>[];
  /** Connect through a TCP proxy the test can cut. */
  throughProxy?: boolean;
  /** Copy this template database (default: the run's, TEST_PG_TEMPLATE); null on a server that has none (a test's private server): migrated from scratch. */
  template?: string | null;
}): Promise<TestDatabase> {
  const suffix = `${process.pid}_${randomBytes(4).toString('hex')}`;
  const cleanups: (() => Promise<unknown>)[] = [];
  let url: string;
  if (options.postgresUrl) {
    const template = options.template === undefined ? process.env.TEST_PG_TEMPLATE : options.template;
    const name = `sp_t_${suffix}`;
    await adminQuery(options.postgresUrl, template ? `create database ${name} template ${template}` : `create database ${name}`);
    url = withDatabaseName(options.postgresUrl, name);
    cleanups.push(() => dropDatabase(options.postgresUrl!, name));
  } else {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), `sp-pglite-${suffix}-`));
    const template = process.env.TEST_PGLITE_TEMPLATE;
    if (template) await fs.cp(template, dir, { recursive: true });
    const embedded = await startEmbeddedPostgres(dir);
    url = embedded.url;
    cleanups.push(() => fs.rm(dir, { recursive: true, force: true }), () => embedded.close());
  }
  let proxy: TcpProxy | undefined;
  if (options.throughProxy) {
    const target = new URL(url);
    proxy = await startTcpProxy(target.hostname, Number(target.port));
    const proxied = new URL(url);
    proxied.port = String(proxy.port);
    url = proxied.toString();
    cleanups.push(() => proxy!.cut().catch(() => {}));
  }
  // Migrations run here too: a no-op on a template copy, the whole set otherwise.
  let recording: string[] | undefined;
  const opened = await openDatabase({
    databaseUrl: url, dataDir: os.tmpdir(), entities, extraEntities: options.extraEntities, poolMax: options.postgresUrl ? 4 : 1,
    onQuery: (sql) => recording?.push(sql),
  });
  // PGlite behind its socket is the embedded database, as the control plane opens it: one session, no URL for
  // connections of their own (a LISTEN connection would take the only session from the pool).
  const db: Database = options.postgresUrl ? opened : { ...opened, embedded: true, url: undefined };
  // A copy of the template holds the template's deployment id: each test database is a deployment of its own.
  await db.orm.em.fork().getConnection().execute(`update deployment set deployment_id = gen_random_uuid()`);
  return {
    db,
    real: Boolean(options.postgresUrl),
    proxy,
    url,
    async statementsDuring(fn) {
      recording = [];
      try {
        await fn();
        return recording;
      } finally {
        recording = undefined;
      }
    },
    async dispose() {
      await db.close().catch(() => {});
      for (const cleanup of cleanups.reverse()) await cleanup();
    },
  };
}
