// The Koa application: middleware in a fixed order (security headers →
// request context → access log → metrics → error mapping → routes), plus the
// system endpoints (/openapi.json, /docs, /metrics, /healthz).
import { randomUUID } from 'node:crypto';
import Koa from 'koa';
import Router from '@koa/router';
import type { EntityManager } from '@mikro-orm/postgresql';
import { serveDocs } from './docs-page.ts';
import { ApiError } from './errors.ts';
import { errorHandler } from './error-handler.ts';
import type { HttpMetrics } from './metrics.ts';
import { buildOpenApi } from './openapi.ts';
import { consumeRateLimit, rateLimited, rateLimitHeaders } from './rate-limit.ts';
import type { RouteDefinition } from './route.ts';
import { buildRouter } from './router.ts';
import type { AppServices } from './services.ts';

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface AppOptions {
  routes: RouteDefinition[];
  metrics: HttpMetrics;
  version: string;
}

export function createApp(app: AppServices, options: AppOptions): Koa {
  const koa = new Koa({ proxy: app.config.TRUST_PROXY });
  koa.silent = true;

  // 1. Security headers: JSON APIs need no scripts, frames or caching by intermediaries.
  koa.use(async (ctx, next) => {
    ctx.set({
      'x-content-type-options': 'nosniff',
      'x-frame-options': 'DENY',
      'referrer-policy': 'no-referrer',
      'cross-origin-resource-policy': 'same-origin',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'cache-control': 'no-store',
    });
    await next();
  });

  // 2. Request context: request id (echoed, and in error bodies), logger, entity manager.
  koa.use(async (ctx, next) => {
    const incoming = ctx.get('x-request-id');
    const requestId = REQUEST_ID.test(incoming) ? incoming : randomUUID();
    ctx.state.requestId = requestId;
    ctx.set('x-request-id', requestId);
    // The child logger is made on first use: most requests of a silent or info-level
    // server log once (access log) or not at all.
    let log: typeof app.log | undefined;
    Object.defineProperty(ctx.state, 'log', {
      get: () => (log ??= app.log.child({ request_id: requestId })),
      set: (value) => { log = value; },
      enumerable: true,
      configurable: true,
    });
    // The entity manager is forked on first use: routes that never touch the
    // database (token-only reads, health) skip the fork and its context.
    let em: EntityManager | undefined;
    Object.defineProperty(ctx.state, 'em', {
      get: () => (em ??= app.db.orm.em.fork()),
      enumerable: true,
      configurable: true,
    });
    await next();
  });

  // 3. Access log: path without query string (tokens never reach the log).
  koa.use(async (ctx, next) => {
    const started = performance.now();
    try {
      await next();
    } finally {
      const level = ctx.status >= 500 ? 'error' : 'info';
      if (app.log.isLevelEnabled(level)) ctx.state.log[level]({
        method: ctx.method,
        path: ctx.path,
        route: ctx._matchedRoute ?? null,
        status: ctx.status,
        duration_ms: Math.round((performance.now() - started) * 100) / 100,
        ip: ctx.ip,
      }, 'request');
    }
  });

  // 4. Metrics by matched route, so ids in paths don't explode label cardinality.
  koa.use(async (ctx, next) => {
    const end = options.metrics.requestDuration.startTimer({ method: ctx.method });
    try {
      await next();
    } finally {
      end({ route: String(ctx._matchedRoute ?? 'unmatched'), status: String(ctx.status) });
    }
  });

  // 5. Error mapping.
  koa.use(errorHandler);

  // 6. Per-client budget on the API (route-specific limits come on top).
  if (app.config.RATE_LIMIT_PER_MINUTE > 0) {
    koa.use(async (ctx, next) => {
      if (ctx.path.startsWith('/v1/')) {
        const result = await consumeRateLimit(app.store, `global:${ctx.ip}`, app.config.RATE_LIMIT_PER_MINUTE, 60);
        if (!result.allowed) throw rateLimited(result);
        ctx.set(rateLimitHeaders(result));
      }
      await next();
    });
  }

  // 7. System endpoints and the API routes.
  let openApiDocument: Record<string, unknown> | undefined;
  const system = new Router();
  system.get('/openapi.json', (ctx) => {
    openApiDocument ??= buildOpenApi(options.routes, { title: 'Streaming platform API', version: options.version, serverUrl: app.config.publicUrl });
    ctx.set('cache-control', 'no-cache');
    ctx.body = openApiDocument;
  });
  system.get('/docs', (ctx) => serveDocs(ctx));
  system.get('/docs/:asset', (ctx) => serveDocs(ctx, ctx.params.asset));
  system.get('/metrics', async (ctx) => {
    ctx.type = options.metrics.registry.contentType;
    ctx.body = await options.metrics.registry.metrics();
  });
  system.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  const api = buildRouter(options.routes, app);
  koa.use(system.routes());
  koa.use(api.routes());
  koa.use(api.allowedMethods({ throw: true, methodNotAllowed: () => new ApiError('METHOD_NOT_ALLOWED'), notImplemented: () => new ApiError('METHOD_NOT_ALLOWED') }));
  return koa;
}
