// The composition root: builds and runs one control-plane instance from the
// platform services (database: PostgreSQL or embedded PGlite; store: Redis or
// in-process; mailer; secrets) and the capabilities listed in
// capabilities.ts. Used by main.ts and by the tests alike, so tests exercise
// the same wiring as production.
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EntityClass } from '@mikro-orm/core';
import type { Logger } from 'pino';
import { capabilities, entities, jobs as capabilityJobs, personalData, routes as capabilityRoutes, type AppServices } from './capabilities.ts';
import type { Config } from './config/config.ts';
import { systemClock, type Clock } from './core/clock.ts';
import type { CoreServices } from './core/services.ts';
import { deriveKey, loadSecretsKey, SecretBox, SECRET_BOX_PURPOSE, TOKEN_PEPPER_PURPOSE } from './crypto/secret-box.ts';
import { deploymentNamespace } from './db/deployment.ts';
import { openDatabase, type Database } from './db/orm.ts';
import { createApp } from './http/app.ts';
import { createLogger } from './http/logger.ts';
import type { Registry } from 'prom-client';
import { createHttpMetrics } from './http/metrics.ts';
import type { RouteDefinition } from './http/route.ts';
import type { AccessControl } from './http/services.ts';
import { DeferredTasks } from './jobs/deferred-tasks.ts';
import { JobQueue, type JobDefinition } from './jobs/index.ts';
import { createMailer } from './mail/mailer.ts';
import { mountPages } from './pages/pages.ts';
import { createStore, namespacePrefix, type KeyValueStore } from './store/index.ts';

export type { AppServices } from './capabilities.ts';

export const version: string = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;

export interface ControlPlaneOptions {
  log?: Logger;
  /** Use this database instead of opening one from the config (tests). */
  db?: Database;
  store?: KeyValueStore;
  storeKeyPrefix?: string;
  extraEntities?: EntityClass<object>[];
  /** Routes beyond the product's own (tests mount fixture routes this way). */
  extraRoutes?: RouteDefinition<AppServices>[];
  /** Job types beyond the product's own (tests register fixture jobs this way). */
  extraJobs?: JobDefinition<any, AppServices>[];
  /** The clock (default: the system's; tests pass a ManualClock to reach expiries and due work). */
  clock?: Clock;
  /** Services that replace the capabilities' own once they have started (tests give the edge channel an in-test ConfigSource). */
  services?: Partial<AppServices>;
}

export interface ControlPlane {
  app: AppServices;
  /** The guard every route goes through. */
  access: AccessControl;
  server: http.Server;
  url: string;
  close(): Promise<void>;
}

export async function startControlPlane(config: Config, options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const log = options.log ?? createLogger(config.LOG_LEVEL);
  const db = options.db ?? await openDatabase({ databaseUrl: config.DATABASE_URL, dataDir: config.dataDir, entities, extraEntities: options.extraEntities, log });
  // Every key and channel in this deployment's namespace (REDIS_NAMESPACE, or the database's deployment id):
  // deployments sharing one Redis server never see each other's.
  const store = options.store ?? createStore(config.REDIS_URL, options.storeKeyPrefix ?? (config.REDIS_URL ? namespacePrefix(await deploymentNamespace(config, db)) : ''));
  const secretsKey = await loadSecretsKey({ secretsKey: config.SECRETS_KEY, dataDir: config.dataDir, production: config.NODE_ENV === 'production' });
  const mailer = createMailer({ smtpUrl: config.SMTP_URL, dataDir: config.dataDir, from: config.MAIL_FROM, logger: log.child({ component: 'mail' }) });
  const deferred = new DeferredTasks(log.child({ component: 'deferred' }));
  const clock = options.clock ?? systemClock;
  const core: CoreServices = {
    config, db, store, log, clock, version, mailer, deferred,
    secretBox: new SecretBox(deriveKey(secretsKey, SECRET_BOX_PURPOSE)),
    tokenPepper: deriveKey(secretsKey, TOKEN_PEPPER_PURPOSE),
    deriveKey: (purpose) => deriveKey(secretsKey, purpose),
  };

  // Every capability may enqueue jobs from its start on; handlers get the finished services.
  const jobs = new JobQueue({
    db, clock, services: core, log: log.child({ component: 'jobs' }),
    pollMs: config.JOBS_POLL_MS, concurrency: config.JOBS_CONCURRENCY, shutdownTimeoutMs: config.SHUTDOWN_TIMEOUT_MS,
  });
  jobs.register([...capabilityJobs, ...(options.extraJobs ?? [])]);

  // Each capability may add services for those after it, and one provides the guard; the
  // personal-data providers of all of them are gathered for the export and the erasure.
  const app = Object.assign(core, { jobs }) as AppServices;
  app.personalData = personalData;
  let access: AccessControl | undefined;
  const closers: (() => Promise<void>)[] = [];
  const capabilityMetrics: ((registry: Registry) => void)[] = [];
  for (const capability of capabilities) {
    const started = await capability.start?.(app);
    if (started?.services) Object.assign(app, started.services);
    if (started?.access) access = started.access;
    if (started?.close) closers.unshift(started.close);
    if (started?.metrics) capabilityMetrics.push(started.metrics);
  }
  if (!access) throw new Error('No capability provides access control');
  if (options.services) Object.assign(app, options.services);

  const metrics = createHttpMetrics();
  for (const register of capabilityMetrics) register(metrics.registry);
  jobs.metrics.register(metrics.registry);
  const routes = [...capabilityRoutes, ...(options.extraRoutes ?? [])];
  const koa = createApp(app, {
    routes, access, metrics, version,
    checkContract: config.NODE_ENV !== 'production',
    // The index at / and the pages the e-mail links open.
    mount: (router) => mountPages(router, { version, publicUrl: config.publicUrl }),
  });

  const server = http.createServer({
    // Slow senders of headers or bodies are cut off (the edge agent does the same).
    headersTimeout: config.HEADERS_TIMEOUT_MS,
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    connectionsCheckingInterval: Math.min(5_000, config.HEADERS_TIMEOUT_MS),
  }, koa.callback());
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.PORT, config.HOST, () => resolve());
  });
  if (config.JOBS_WORKER) jobs.start();
  const { port } = server.address() as AddressInfo;
  const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;

  let closing: Promise<void> | undefined;
  return {
    app,
    access,
    server,
    url: `http://${host}:${port}`,
    close() {
      closing ??= (async () => {
        // Stop accepting, let in-flight requests and running jobs finish, then drop what is left.
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        const timer = setTimeout(() => server.closeAllConnections(), config.SHUTDOWN_TIMEOUT_MS);
        await Promise.all([closed, jobs.stop()]);
        clearTimeout(timer);
        // Work the finished requests handed off still needs the database and the mailer.
        await deferred.close();
        mailer.close();
        for (const close of closers) await close();
        if (!options.store) await store.close();
        if (!options.db) await db.close();
      })();
      return closing;
    },
  };
}
