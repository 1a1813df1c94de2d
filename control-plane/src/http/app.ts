// The Koa application: one request frame (security headers → request context
// → routes → error mapping → access log → metrics by route), the per-client
// rate limit, and one router holding the API routes and the system endpoints
// (/openapi.json, /docs, /metrics, /healthz, and whatever the composition
// root mounts through `mount`).
import { randomUUID } from 'node:crypto';
import Koa from 'koa';
import { serveDocs } from './docs-page.ts';
import { ApiError } from './errors.ts';
import { respondWithError } from './error-handler.ts';
import { RequestState } from './request-state.ts';
import type { HttpMetrics } from './metrics.ts';
import { buildOpenApi } from './openapi.ts';
import { consumeRateLimit, rateLimited, rateLimitHeaders, type RateLimitResult } from './rate-limit.ts';
import type { RouteDefinition } from './route.ts';
import { buildRouter, type Router } from './router.ts';
import type { AccessControl, HttpServices } from './services.ts';

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface AppOptions<S> {
  routes: readonly RouteDefinition<S>[];
  access: AccessControl;
  metrics: HttpMetrics;
  version: string;
  /**
   * Check every reply against its route's declaration (undeclared status,
   * body off its schema, undeclared error code → 500 naming the difference).
   * On outside production.
   */
  checkContract: boolean;
  /** Adds system endpoints (pages, documents) to the router. */
  mount?: (router: Router) => void;
}

export function createApp<S extends HttpServices>(app: S, options: AppOptions<S>): Koa {
  const koa = new Koa({ proxy: app.config.TRUST_PROXY });
  koa.silent = true;
  const { metrics } = options;
  const router = buildRouter(options.routes, app, options.access);
  const { checkContract } = options;
  const globalLimit = app.config.RATE_LIMIT_PER_MINUTE;
  const stateServices = { log: app.log, db: app.db };

  // The whole request frame in one middleware, so each request pays for one
  // async frame: security headers → request context → per-client budget →
  // route → error mapping → access log → metrics by matched route.
  koa.use(async (ctx) => {
    const started = performance.now();
    const res = ctx.res;
    for (let i = 0; i < SECURITY_HEADERS.length; i++) res.setHeader(SECURITY_HEADERS[i]![0], SECURITY_HEADERS[i]![1]);
    const incoming = ctx.req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('x-request-id', requestId);
    const state = new RequestState(stateServices, ctx, requestId);
    ctx.state = state;
    try {
      const match = router.match(ctx);
      // Decided on the route matched (or on no route: unknown paths spend the budget too), not on the path's spelling.
      if (globalLimit > 0 && (!match.found || match.counted)) await applyGlobalLimit(ctx, state, app, globalLimit);
      if (!match.found) {
        if (match.allow) throw new ApiError('METHOD_NOT_ALLOWED', 'Method not allowed on this path', { headers: { allow: match.allow } });
        throw new ApiError('NOT_FOUND', 'No such route');
      }
      await match.run();
    } catch (error) {
      respondWithError(ctx, error, checkContract);
    } finally {
      const route = state.routePath;
      const seconds = (performance.now() - started) / 1000;
      metrics.observe(ctx.method, route, ctx.status, seconds);
      const level = ctx.status >= 500 ? 'error' : 'info';
      // Path without query string: tokens never reach the log.
      if (app.log.isLevelEnabled(level)) {
        state.log[level]({ method: ctx.method, path: ctx.path, route, status: ctx.status, duration_ms: Math.round(seconds * 100_000) / 100, ip: ctx.ip }, 'request');
      }
    }
  });

  // System endpoints share the router: one match per request.
  let openApiDocument: Record<string, unknown> | undefined;
  router.on('get', '/openapi.json', async (ctx) => {
    openApiDocument ??= buildOpenApi([...options.routes], { title: 'Streaming platform API', version: options.version, serverUrl: app.config.publicUrl });
    ctx.set('cache-control', 'no-cache');
    ctx.body = openApiDocument;
  });
  router.on('get', '/docs', (ctx) => serveDocs(ctx));
  router.on('get', '/docs/:asset', (ctx, params) => serveDocs(ctx, params.asset));
  router.on('get', '/metrics', async (ctx) => {
    ctx.type = options.metrics.registry.contentType;
    ctx.body = await options.metrics.registry.metrics();
  });
  router.on('get', '/healthz', async (ctx) => {
    ctx.body = { status: 'ok' };
  });
  options.mount?.(router);
  return koa;
}

/**
 * The per-client budget on the API (route-specific limits come on top): every
 * request to an API route but readiness, and every request that matches no
 * route. It fails open: with Redis down the API still answers (and readiness
 * says why); the limits of sensitive routes (login, register...) fail closed
 * instead.
 */
async function applyGlobalLimit(ctx: Koa.Context, state: RequestState, app: HttpServices, limit: number): Promise<void> {
  let result: RateLimitResult | undefined;
  try {
    result = await consumeRateLimit(app.store, `global:${ctx.ip}`, limit, 60);
  } catch (error) {
    state.log.warn({ err: error }, 'global rate limit skipped: store unavailable');
    return;
  }
  if (!result.allowed) throw rateLimited(result);
  ctx.set(rateLimitHeaders(result));
}

const SECURITY_HEADERS: [string, string][] = [
  // JSON APIs need no sniffing, framing, referrers or caching by intermediaries.
  ['x-content-type-options', 'nosniff'],
  ['x-frame-options', 'DENY'],
  ['referrer-policy', 'no-referrer'],
  ['cross-origin-resource-policy', 'same-origin'],
  ['content-security-policy', "default-src 'none'; frame-ancestors 'none'"],
  ['cache-control', 'no-store'],
];
