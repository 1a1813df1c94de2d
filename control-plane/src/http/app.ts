// The Koa application: one request frame (security headers → request context
// → error mapping → access log → metrics by route), the per-client rate limit,
// then one router holding the API routes and the system endpoints
// (/openapi.json, /docs, /metrics, /healthz).
import { randomUUID } from 'node:crypto';
import Koa from 'koa';
import { mountPages } from '../pages/pages.ts';
import { serveDocs } from './docs-page.ts';
import { ApiError } from './errors.ts';
import { respondWithError } from './error-handler.ts';
import { RequestState } from './request-state.ts';
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
  const observe = routeObserver(options.metrics);

  // 1. The request frame, in one middleware so each request pays for one async
  // frame rather than five: security headers → request context → (routes) →
  // error mapping → access log → metrics by matched route.
  koa.use(async (ctx, next) => {
    const started = performance.now();
    const res = ctx.res;
    for (const [name, value] of SECURITY_HEADERS) res.setHeader(name, value);
    const incoming = ctx.get('x-request-id');
    const requestId = REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('x-request-id', requestId);
    ctx.state = new RequestState(app, requestId);
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) throw new ApiError('NOT_FOUND', 'No such route');
    } catch (error) {
      respondWithError(ctx, error);
    } finally {
      const route = ctx._matchedRoute === undefined ? 'unmatched' : String(ctx._matchedRoute);
      const seconds = (performance.now() - started) / 1000;
      observe(ctx.method, route, ctx.status, seconds);
      const level = ctx.status >= 500 ? 'error' : 'info';
      // Path without query string: tokens never reach the log.
      if (app.log.isLevelEnabled(level)) {
        ctx.state.log[level]({ method: ctx.method, path: ctx.path, route, status: ctx.status, duration_ms: Math.round(seconds * 100_000) / 100, ip: ctx.ip }, 'request');
      }
    }
  });

  // 2. Per-client budget on the API (route-specific limits come on top). It
  // fails open: with Redis down the API still answers (and readiness says why);
  // the limits of sensitive routes (login, register...) fail closed instead.
  if (app.config.RATE_LIMIT_PER_MINUTE > 0) {
    koa.use(async (ctx, next) => {
      if (ctx.path.startsWith('/v1/') && !ctx.path.startsWith('/v1/cdn/health/')) {
        let result: Awaited<ReturnType<typeof consumeRateLimit>> | undefined;
        try {
          result = await consumeRateLimit(app.store, `global:${ctx.ip}`, app.config.RATE_LIMIT_PER_MINUTE, 60);
        } catch (error) {
          ctx.state.log.warn({ err: error }, 'global rate limit skipped: store unavailable');
        }
        if (result && !result.allowed) throw rateLimited(result);
        if (result) ctx.set(rateLimitHeaders(result));
      }
      await next();
    });
  }

  // 3. System endpoints and the API routes, in one router: one match per request.
  const router = buildRouter(options.routes, app);
  let openApiDocument: Record<string, unknown> | undefined;
  router.get('/openapi.json', (ctx) => {
    openApiDocument ??= buildOpenApi(options.routes, { title: 'Streaming platform API', version: options.version, serverUrl: app.config.publicUrl });
    ctx.set('cache-control', 'no-cache');
    ctx.body = openApiDocument;
  });
  router.get('/docs', (ctx) => serveDocs(ctx));
  router.get('/docs/:asset', (ctx) => serveDocs(ctx, ctx.params.asset));
  router.get('/metrics', async (ctx) => {
    ctx.type = options.metrics.registry.contentType;
    ctx.body = await options.metrics.registry.metrics();
  });
  router.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  mountPages(router, { version: options.version, publicUrl: app.config.publicUrl });
  koa.use(router.routes());
  koa.use(router.allowedMethods({ throw: true, methodNotAllowed: () => new ApiError('METHOD_NOT_ALLOWED', 'Method not allowed on this path'), notImplemented: () => new ApiError('METHOD_NOT_ALLOWED') }));
  return koa;
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

/** Observes the request histogram through a cached child per label set (label hashing once, not per request). */
function routeObserver(metrics: HttpMetrics): (method: string, route: string, status: number, seconds: number) => void {
  const children = new Map<string, { observe(value: number): void }>();
  return (method, route, status, seconds) => {
    const key = `${method} ${status} ${route}`;
    let child = children.get(key);
    if (!child) {
      child = metrics.requestDuration.labels({ method, route, status: String(status) });
      children.set(key, child);
    }
    child.observe(seconds);
  };
}
