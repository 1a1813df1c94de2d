// Builds and runs one control-plane instance: database (PostgreSQL or embedded
// PGlite), store (Redis or in-process), HTTP server. Used by main.ts and by the
// tests alike, so tests exercise the same wiring as production.
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EntityClass } from '@mikro-orm/core';
import type { Logger } from 'pino';
import type { Config } from './config/config.ts';
import { openDatabase, type Database } from './db/orm.ts';
import { createApp } from './http/app.ts';
import { createLogger } from './http/logger.ts';
import { createHttpMetrics } from './http/metrics.ts';
import type { RouteDefinition } from './http/route.ts';
import type { AppServices } from './http/services.ts';
import { TokenAccessControl } from './auth/access-control.ts';
import { syncRoleCatalog } from './auth/permissions/permission-service.ts';
import { SessionService } from './auth/session-service.ts';
import { TokenService } from './auth/token-service.ts';
import { deriveKey, loadSecretsKey, SecretBox } from './crypto/secret-box.ts';
import { DeferredTasks } from './jobs/deferred-tasks.ts';
import { createMailer } from './mail/mailer.ts';
import { routes as allRoutes } from './routes.ts';
import { createStore, type KeyValueStore } from './store/index.ts';

export const version: string = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;

export interface ControlPlaneOptions {
  log?: Logger;
  /** Use this database instead of opening one from the config (tests). */
  db?: Database;
  store?: KeyValueStore;
  storeKeyPrefix?: string;
  extraEntities?: EntityClass<object>[];
  /** Routes beyond the product's own (tests mount fixture routes this way). */
  extraRoutes?: RouteDefinition[];
  /** Clock (ms since the epoch) for issuing and verifying tokens; tests move it to reach expiries. */
  now?: () => number;
}

export interface ControlPlane {
  app: AppServices;
  server: http.Server;
  url: string;
  close(): Promise<void>;
}

export async function startControlPlane(config: Config, options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const log = options.log ?? createLogger(config.LOG_LEVEL);
  const db = options.db ?? await openDatabase({ databaseUrl: config.DATABASE_URL, dataDir: config.dataDir, extraEntities: options.extraEntities, log });
  const store = options.store ?? createStore(config.REDIS_URL, options.storeKeyPrefix);
  await syncRoleCatalog(db.orm.em.fork());
  const secretsKey = await loadSecretsKey({ secretsKey: config.SECRETS_KEY, dataDir: config.dataDir, production: config.NODE_ENV === 'production' });
  const secretBox = new SecretBox(deriveKey(secretsKey, 'secret-box'));
  const tokenPepper = deriveKey(secretsKey, 'token-pepper');
  const tokens = await TokenService.create({ em: db.orm.em.fork(), store, box: secretBox, issuer: config.publicUrl, now: options.now });
  const sessions = new SessionService(tokenPepper, tokens);
  const mailer = createMailer({ smtpUrl: config.SMTP_URL, dataDir: config.dataDir, from: config.MAIL_FROM, logger: log.child({ component: 'mail' }) });
  const access = new TokenAccessControl(tokens);
  const deferred = new DeferredTasks(log.child({ component: 'deferred' }));
  const app: AppServices = { config, db, store, log, access, version, mailer, secretBox, tokenPepper, tokens, sessions, deferred };
  const metrics = createHttpMetrics();
  const routes = [...allRoutes, ...(options.extraRoutes ?? [])];
  const koa = createApp(app, { routes, metrics, version });

  const server = http.createServer(koa.callback());
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.PORT, config.HOST, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;

  let closing: Promise<void> | undefined;
  return {
    app,
    server,
    url: `http://${host}:${port}`,
    close() {
      closing ??= (async () => {
        // Stop accepting, let in-flight requests finish, then drop what is left.
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        const timer = setTimeout(() => server.closeAllConnections(), config.SHUTDOWN_TIMEOUT_MS);
        await closed;
        clearTimeout(timer);
        // Work the finished requests handed off still needs the database and the mailer.
        await deferred.close();
        mailer.close();
        await tokens.close();
        if (!options.store) await store.close();
        if (!options.db) await db.close();
      })();
      return closing;
    },
  };
}
