// Starts a real control plane for a test file: its own database, its own
// Redis key prefix, an HTTP server on a free port. Torn down by t.teardown.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { EntityClass } from '@mikro-orm/core';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { loadConfig, type Config } from '../../control-plane/src/config/config.ts';
import type { Clock } from '../../control-plane/src/core/clock.ts';
import { withTimeout } from '../../control-plane/src/core/timeout.ts';
import type { RouteDefinition } from '../../control-plane/src/http/route.ts';
import type { JobDefinition } from '../../control-plane/src/jobs/index.ts';
import { startControlPlane, type AppServices, type ControlPlane } from '../../control-plane/src/server.ts';
import { createStore } from '../../control-plane/src/store/index.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { detectServices } from './services.ts';

interface Teardown { teardown(fn: () => unknown): void }

/** Longer than any shutdown wait of the control plane (SHUTDOWN_TIMEOUT_MS, 10 s), shorter than a file's timeout. */
const TEARDOWN_STEP_MS = 45_000;

export interface TestControlPlane extends ControlPlane {
  config: Config;
  database: TestDatabase;
  /** This file's Redis key prefix (a second replica shares it). */
  storeKeyPrefix: string;
  /** fetch against the server; JSON bodies are encoded when `json` is given. */
  request(method: string, path: string, options?: RequestOptions): Promise<TestResponse>;
}

export interface RequestOptions {
  json?: unknown;
  body?: string | Buffer | FormData;
  headers?: Record<string, string>;
}

export interface TestResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export async function startTestControlPlane(
  t: Teardown,
  options: {
    env?: Record<string, string>;
    extraEntities?: EntityClass<object>[];
    extraRoutes?: RouteDefinition[];
    /** Fixture job types (beside the product's). */
    extraJobs?: JobDefinition<any, AppServices>[];
    /** E.g. a ManualClock the test moves. */
    clock?: Clock;
    /** The control plane's logger (e.g. one collecting lines, to show what never reaches the log). */
    log?: Logger;
    /** Embedded PGlite even when a PostgreSQL server is reachable. */
    embedded?: boolean;
    throughProxy?: boolean;
    /** Services that replace the capabilities' own once started (e.g. an in-test ConfigSource for the edge channel). */
    services?: Partial<AppServices>;
  } = {},
): Promise<TestControlPlane> {
  const services = await detectServices();
  const database = await createTestDatabase({
    postgresUrl: options.embedded ? undefined : services.postgresUrl,
    extraEntities: options.extraEntities,
    throughProxy: options.throughProxy,
  });
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-cp-'));
  const config = loadConfig({
    NODE_ENV: 'test',
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Tests drive jobs by hand (cp.app.jobs.runDue()); a file that wants the background loop sets JOBS_WORKER=true.
    JOBS_WORKER: 'false',
    // Configuration versions are published by hand (POST /v1/cdn/config/publish) unless a file sets CDN_PUBLISH_MODE=auto:
    // the auto publisher's background reads would otherwise land in tests that count a request's statements.
    CDN_PUBLISH_MODE: 'manual',
    ...(services.redisUrl ? { REDIS_URL: services.redisUrl } : {}),
    ...options.env,
  });
  const keyPrefix = `t:${randomBytes(6).toString('hex')}:`;
  const store = createStore(config.REDIS_URL, keyPrefix);
  const cp = await startControlPlane(config, { db: database.db, store, extraRoutes: options.extraRoutes, extraJobs: options.extraJobs, clock: options.clock, log: options.log, services: options.services });

  t.teardown(async () => {
    // Each step bounded and named: a wait that never ends fails here, saying which, not at the file's timeout.
    const step = (what: string, work: Promise<unknown>) =>
      withTimeout(work, TEARDOWN_STEP_MS, () => new Error(`teardown: ${what} did not finish within ${TEARDOWN_STEP_MS / 1000} s`));
    await step('closing the control plane', cp.close());
    await step('closing the store', store.close());
    if (config.REDIS_URL && config.REDIS_URL === services.redisUrl) await step('deleting the Redis keys', deleteKeys(config.REDIS_URL, keyPrefix));
    await step('dropping the database', database.dispose());
    await fs.rm(dataDir, { recursive: true, force: true });
  });

  return {
    ...cp,
    config,
    database,
    storeKeyPrefix: keyPrefix,
    async request(method, urlPath, requestOptions = {}) {
      const headers: Record<string, string> = { ...requestOptions.headers };
      let body = requestOptions.body;
      if (requestOptions.json !== undefined) {
        body = JSON.stringify(requestOptions.json);
        headers['content-type'] ??= 'application/json';
      }
      const response = await fetch(cp.url + urlPath, { method, headers, body: body as never });
      const text = await response.text();
      let parsed: unknown = undefined;
      if (text && response.headers.get('content-type')?.includes('json')) parsed = JSON.parse(text);
      return { status: response.status, headers: response.headers, body: parsed, text };
    },
  };
}

async function deleteKeys(redisUrl: string, prefix: string): Promise<void> {
  const redis = new Redis(redisUrl, { connectTimeout: 5000, commandTimeout: 10_000, maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      if (keys.length) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}
