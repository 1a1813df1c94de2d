// Turns route declarations into Koa routes. Per request, in this order:
// body parsing → authentication (401) → route rate limits → validation (400)
// → authorization (403) → idempotency → handler → response.
import Router from '@koa/router';
import type { Context, Middleware } from 'koa';
import { koaBody } from 'koa-body';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ApiError } from './errors.ts';
import { withIdempotency, requestFingerprint } from './idempotency.ts';
import { enforceRateLimit, rateLimitHeaders } from './rate-limit.ts';
import type { Reply, RouteDefinition } from './route.ts';
import { idempotencyKeyHeader } from './schemas.ts';
import type { AppServices } from './services.ts';
import { issuesToFieldErrors, validateRequest } from './validation.ts';

const bodyMethods = new Set(['post', 'put', 'patch', 'delete']);

export function callerKey(ctx: Context): string {
  const auth = ctx.state.auth as { type: string; id: string } | undefined;
  return auth ? `${auth.type}:${auth.id}` : `ip:${ctx.ip}`;
}

function bodyParser(route: RouteDefinition, app: AppServices): Middleware | undefined {
  if (!bodyMethods.has(route.method)) return undefined;
  if (route.multipart) {
    return koaBody({
      multipart: true,
      json: false,
      urlencoded: false,
      text: false,
      formLimit: app.config.BODY_LIMIT_BYTES,
      formidable: { maxFileSize: route.multipart.maxFileBytes, maxFiles: 1, allowEmptyFiles: false },
      parsedMethods: ['POST', 'PUT', 'PATCH'] as never,
    });
  }
  return koaBody({
    json: true,
    jsonStrict: true,
    multipart: false,
    urlencoded: false,
    text: false,
    jsonLimit: app.config.BODY_LIMIT_BYTES,
    parsedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'] as never,
  });
}

/** A body that is present must be JSON (or multipart for upload routes). */
function requireContentType(route: RouteDefinition): Middleware {
  return async (ctx, next) => {
    const hasBody = Number(ctx.get('content-length') || 0) > 0 || Boolean(ctx.get('transfer-encoding'));
    if (hasBody) {
      const wanted = route.multipart ? 'multipart/form-data' : 'application/json';
      if (!ctx.is(wanted) && !(wanted === 'application/json' && ctx.is('+json'))) {
        throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `Request body must be ${wanted}`);
      }
    }
    await next();
  };
}

export function buildRouter(routes: RouteDefinition[], app: AppServices): Router {
  const router = new Router();
  for (const route of routes) {
    const chain: Middleware[] = [];
    if (route.body || route.multipart) {
      chain.push(requireContentType(route));
      const parser = bodyParser(route, app);
      if (parser) chain.push(parser);
    }
    chain.push(async (ctx) => {
      await app.access.authenticate(ctx, route.access);
      for (const rule of route.rateLimits ?? []) {
        const subject = rule.by === 'ip' ? `ip:${ctx.ip}` : rule.by === 'caller' ? callerKey(ctx) : rule.by({ params: ctx.params, query: ctx.query, body: (ctx.request as { body?: unknown }).body, ctx, app });
        if (subject === undefined) continue;
        const limit = rule.by === 'ip' ? rule.limit * app.config.RATE_LIMIT_IP_MULTIPLIER : rule.limit;
        const result = await enforceRateLimit(app.store, `${rule.name}:${subject}`, limit, rule.windowSeconds);
        ctx.set(rateLimitHeaders(result));
      }
      const input = validateRequest(ctx, route);
      await app.access.authorize(ctx, route.access, input);

      const handlerInput = {
        ...input,
        ctx,
        // Read lazily: a handler that never uses the database never forks an entity manager.
        get em(): EntityManager { return ctx.state.em as EntityManager; },
        requestId: ctx.state.requestId as string,
        get log() { return ctx.state.log; },
        app,
      };
      const run = () => route.handler(handlerInput as never);

      const idempotencyKey = route.idempotent ? ctx.get('idempotency-key') : '';
      let result: Reply;
      if (idempotencyKey) {
        const parsed = idempotencyKeyHeader.safeParse(idempotencyKey);
        if (!parsed.success) throw new ApiError('VALIDATION_ERROR', undefined, { errors: issuesToFieldErrors(parsed.error.issues, 'Idempotency-Key') });
        result = await withIdempotency(
          { store: app.store, caller: callerKey(ctx), key: parsed.data, requestId: ctx.state.requestId as string, fingerprint: requestFingerprint(ctx.method, ctx.path, (ctx.request as { body?: unknown }).body) },
          run,
        );
      } else {
        result = await run();
      }
      ctx.status = result.status;
      if (result.headers) ctx.set(result.headers);
      if (result.body !== undefined && result.status !== 204) ctx.body = result.body;
    });
    router.register(route.path, [route.method], chain, { name: route.operationId ?? `${route.method} ${route.path}` });
  }
  return router;
}
