// Turns route declarations into request handlers on a radix-tree router
// (find-my-way: matching costs the same with 20 routes or 2,000, and paths are
// case-sensitive, so `/V1/...` is not `/v1/...`). Per request, in this order:
// body parsing (JSON nesting bounded) → authentication (401) → route rate
// limits → authorization (403) → validation (400) → If-Match (412) →
// idempotency → handler → reply, presented through the declared record and
// checked against the declaration. A permission scoped to a resource id read
// from the input is checked after validation instead.
// A write whose update lost an optimistic-lock race runs again (CONFLICT_ATTEMPTS).
// Upload (multipart) routes authenticate before receiving the body.
import type { Context, Middleware } from 'koa';
import { Writable } from 'node:stream';
import { koaBody } from 'koa-body';
import { errors as formidableErrors } from 'formidable';
import FindMyWay from 'find-my-way';
import { OptimisticLockError } from '@mikro-orm/core';
import { z } from 'zod';
import { ApiError, ContractViolation, type FieldError } from './errors.ts';
import { assertIfMatch, ifNoneMatchHits } from './etag.ts';
import { beginIdempotency, idempotencyStoreKey, requestFingerprint, type IdempotentRequest } from './idempotency.ts';
import { enforceRateLimit, rateLimitHeaders, rateLimitLeases } from './rate-limit.ts';
import type { RequestState } from './request-state.ts';
import { Reply, type HttpMethod, type StatementIdempotency, type MultipartSpec, type Responses, type ResponseSpec, type RouteDefinition, type SentReply, type UploadedFile } from './route.ts';
import { idempotencyKeyHeader } from './schemas.ts';
import { parseJsonBody } from './json-body.ts';
import { bodyCoding, JSON_BODY_CODINGS, undecodableBody } from './content-encoding.ts';
import type { AccessControl, HttpServices } from './services.ts';
import { issuesToFieldErrors, validateRequest } from './validation.ts';

export type RequestHandler = (ctx: Context, params: Record<string, string>) => Promise<void>;

const bodyMethods = new Set<HttpMethod>(['post', 'put', 'patch', 'delete']);

/** The input a permission that does not read it is checked with (before validation). */
const NO_INPUT = Object.freeze({ params: undefined, query: undefined, body: undefined });

/** Runs of a write that keeps losing optimistic-lock races before it answers 409 CONFLICT. */
export const CONFLICT_ATTEMPTS = 3;

export function callerKey(ctx: Context): string {
  const actor = (ctx.state as RequestState).actor;
  return actor ? `${actor.type}:${actor.id}` : `ip:${ctx.ip}`;
}

const FILES = Symbol('uploaded bytes');

/** Collects an uploaded part in memory: uploads are bounded (maxFileBytes), and no temporary file is left behind. */
function collectInMemory(file: unknown): Writable {
  const chunks: Buffer[] = [];
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
    final(done) {
      (file as { [FILES]?: Buffer })[FILES] = Buffer.concat(chunks);
      done();
    },
  });
}

function bodyParser(route: RouteDefinition, limit: number): Middleware {
  if (route.multipart) {
    const fileFields = Object.keys(route.multipart.files).length;
    return koaBody({
      multipart: true, json: false, urlencoded: false, text: false,
      formidable: {
        // Checked while the bytes arrive (formidable's total applies per chunk; its per-file check only at the end).
        maxFileSize: route.multipart.maxFileBytes, maxTotalFileSize: route.multipart.maxFileBytes * Math.max(1, fileFields),
        maxFiles: fileFields, allowEmptyFiles: false, maxFields: 50, maxFieldsSize: limit,
        fileWriteStreamHandler: collectInMemory as never,
      },
      parsedMethods: ['POST', 'PUT', 'PATCH'] as never,
    });
  }
  // JSON is received as text (size limit, Content-Encoding: content-encoding.ts) and parsed by parseJsonBody, which bounds its nesting first.
  return koaBody({
    json: false, multipart: false, urlencoded: false, text: true, textTypes: [...JSON_TYPES], textLimit: limit,
    parsedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'] as never,
  });
}

const JSON_TYPES = ['application/json', '+json'] as const;

function hasBody(ctx: Context): boolean {
  const headers = ctx.req.headers;
  const length = headers['content-length'];
  return (length !== undefined && length !== '' && length !== '0') || headers['transfer-encoding'] !== undefined;
}

/** formidable's refusals of a malformed or oversized multipart body, as API errors (its own codes say 500 for some client faults). */
function multipartError(error: unknown, spec: MultipartSpec): ApiError | undefined {
  const e = error as { code?: unknown; httpCode?: unknown; message?: string };
  if (typeof e?.code !== 'number' || typeof e.httpCode !== 'number') return undefined;
  if (e.code === formidableErrors.aborted) return undefined;
  if (e.code === formidableErrors.biggerThanTotalMaxFileSize || e.code === formidableErrors.biggerThanMaxFileSize) {
    return new ApiError('PAYLOAD_TOO_LARGE', `A file may be at most ${spec.maxFileBytes} bytes`);
  }
  if (e.code === formidableErrors.maxFieldsSizeExceeded || e.code === formidableErrors.maxFieldsExceeded) {
    return new ApiError('PAYLOAD_TOO_LARGE', 'The form fields are too large');
  }
  if (e.code === formidableErrors.maxFilesExceeded) {
    return new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: '(body)', message: `At most ${Object.keys(spec.files).length} file(s), one per file field` }] });
  }
  if (e.code === formidableErrors.noEmptyFiles || e.code === formidableErrors.smallerThanMinFileSize) {
    return new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: '(body)', message: 'A file must not be empty' }] });
  }
  return new ApiError('VALIDATION_ERROR', 'Malformed multipart body', { errors: [{ field: '(body)', message: 'Malformed multipart/form-data' }] });
}

/** The uploaded files as the handler gets them, and the errors of unknown or missing file fields. */
function takeFiles(ctx: Context, spec: MultipartSpec): { files: Partial<Record<string, UploadedFile>>; errors: FieldError[] } {
  const raw = ((ctx.request as { files?: Record<string, unknown> }).files ?? {});
  const files: Partial<Record<string, UploadedFile>> = {};
  const errors: FieldError[] = [];
  for (const [field, value] of Object.entries(raw)) {
    if (!Object.hasOwn(spec.files, field)) {
      errors.push({ field, message: 'Unknown field' });
      continue;
    }
    const part = value as { originalFilename?: string | null; mimetype?: string | null; [FILES]?: Buffer };
    const bytes = part[FILES] ?? Buffer.alloc(0);
    files[field] = { field, filename: part.originalFilename ?? '', declaredType: part.mimetype ?? '', size: bytes.length, bytes };
  }
  for (const [field, declared] of Object.entries(spec.files)) {
    if (declared.required && !files[field]) errors.push({ field, message: 'Required: a file in this multipart field' });
  }
  return { files, errors };
}

/** Validates the request; an upload's file-field errors are reported with those of the other fields. */
function validateWithFiles(raw: Parameters<typeof validateRequest>[0], route: RouteDefinition, ctx: Context) {
  if (!route.multipart) return { input: validateRequest(raw, route), files: {} };
  const { files, errors } = takeFiles(ctx, route.multipart);
  let input: ReturnType<typeof validateRequest>;
  try {
    input = validateRequest(raw, route);
  } catch (error) {
    if (error instanceof ApiError && error.code === 'VALIDATION_ERROR' && error.errors) {
      throw new ApiError('VALIDATION_ERROR', undefined, { errors: [...error.errors, ...errors], errorsOmitted: error.errorsOmitted });
    }
    throw error;
  }
  if (errors.length) throw new ApiError('VALIDATION_ERROR', undefined, { errors });
  return { input, files };
}

/** Parses a body when one is sent: JSON (or multipart for upload routes), anything else is 415. */
function readBody(route: RouteDefinition, limit: number): (ctx: Context) => Promise<void> {
  const parse = bodyParser(route, limit);
  const wanted = route.multipart ? 'multipart/form-data' : 'application/json';
  return async (ctx) => {
    if (!hasBody(ctx)) return;
    if (route.multipart ? !ctx.is(wanted) : !ctx.is([...JSON_TYPES])) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `Request body must be ${wanted}`);
    }
    // Canonical for the decoder, which knows the lower-case names only.
    const coding = ctx.req.headers['content-encoding'] = bodyCoding(ctx.req.headers['content-encoding'], route.multipart ? [] : JSON_BODY_CODINGS);
    if (!route.multipart) {
      try {
        await parse(ctx, async () => {});
      } catch (error) {
        throw undecodableBody(error, coding) ?? error;
      }
      const request = ctx.request as { body?: unknown };
      request.body = parseJsonBody(typeof request.body === 'string' ? request.body : '');
      return;
    }
    try {
      await parse(ctx, async () => {});
    } catch (error) {
      throw multipartError(error, route.multipart) ?? error;
    }
  };
}

/** The status a bare value gets: the route's lowest declared status. */
function defaultStatus(route: RouteDefinition): number {
  return Math.min(...Object.keys(route.responses).map(Number));
}

/** Presents a handler's value through the declaration of its status; off-schema values are contract violations. */
function present(route: RouteDefinition, result: unknown, fallbackStatus: number): SentReply & { etag?: string; contentType?: string } {
  const status = result instanceof Reply ? result.status : fallbackStatus;
  const value = result instanceof Reply ? result.value : result;
  const spec = route.responses[status] as ResponseSpec | undefined;
  if (!spec) throw new ContractViolation(route, `answered ${status}, which it does not declare (declared: ${Object.keys(route.responses).join(', ')})`);
  let body: unknown;
  try {
    body = spec.present(value);
  } catch (error) {
    if (error instanceof z.ZodError) {
      const where = error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ');
      throw new ContractViolation(route, `the ${status} body does not match its declared schema: ${where}`);
    }
    throw error;
  }
  const headers = result instanceof Reply ? result.headers : undefined;
  const etag = spec.etag && value ? spec.etag(value) : undefined;
  const contentType = spec.kind === 'binary' ? (value as { contentType: string }).contentType : undefined;
  return { status, body, headers, etag, contentType };
}

/** One route's request handler: the whole pipeline of the declaration. */
function compile<S extends HttpServices>(route: RouteDefinition<S>, app: S, access: AccessControl): RequestHandler {
  const takesBody = bodyMethods.has(route.method);
  const readRequestBody = takesBody ? readBody(route, app.config.BODY_LIMIT_BYTES) : undefined;
  const fallbackStatus = defaultStatus(route);
  const etagged = Object.values(route.responses as Responses).some((spec) => spec.etag);
  const isPublic = route.access === 'public';
  const checksPermission = typeof route.access === 'object';
  const authorizesFirst = typeof route.access === 'object' && route.access.resourceId === undefined;
  const uploads = route.multipart !== undefined;
  const claimedInStatement = route.idempotent === 'statement';

  return async (ctx, params) => {
    const rc = ctx.state as RequestState;
    rc.route = route;
    rc.routePath = route.path;
    rc.preconditioned = Boolean(route.ifMatch && ctx.get('if-match'));
    const authorization = ctx.req.headers.authorization ?? '';
    // A public route without credentials has nobody to authenticate.
    const authenticate = () => (isPublic && authorization === '' ? undefined : access.authenticate(rc, authorization, route.access));
    // An upload is only received from a caller who may send one: authentication first, then megabytes.
    if (uploads) await authenticate();
    if (readRequestBody) await readRequestBody(ctx);
    else if (hasBody(ctx)) throw new ApiError('VALIDATION_ERROR', 'This operation takes no request body', { errors: [{ field: '(body)', message: 'Must be empty' }] });
    if (!uploads) await authenticate();
    const requestBody = (ctx.request as { body?: unknown }).body;
    // The Idempotency-Key is claimed now, in the same tick as the first rate-limit command (one write to Redis for
    // both), and given back if the request is refused before its handler runs.
    const idempotencyKey = route.idempotent ? ctx.get('idempotency-key') : '';
    let idempotent: IdempotentRequest | undefined;
    let idempotency: StatementIdempotency | undefined;
    if (idempotencyKey) {
      const parsed = idempotencyKeyHeader.safeParse(idempotencyKey);
      if (!parsed.success) throw new ApiError('VALIDATION_ERROR', undefined, { errors: issuesToFieldErrors(parsed.error.issues, 'Idempotency-Key') });
      const fingerprint = requestFingerprint(ctx.method, ctx.path, requestBody);
      if (claimedInStatement) idempotency = { key: idempotencyStoreKey(callerKey(ctx), parsed.data), fingerprint };
      else idempotent = beginIdempotency({ store: app.store, caller: callerKey(ctx), key: parsed.data, requestId: rc.requestId, fingerprint });
    }
    // What may still refuse the request before its handler runs: the rate limits, validation, permission, If-Match.
    const admit = async () => {
      for (const rule of route.rateLimits ?? []) {
        const subject = rule.by === 'ip' ? `ip:${ctx.ip}` : rule.by === 'caller' ? callerKey(ctx) : rule.by({ params, query: ctx.query, body: requestBody, ctx, app });
        if (subject === undefined) continue;
        const limit = rule.by === 'ip' ? rule.limit * app.config.RATE_LIMIT_IP_MULTIPLIER : rule.limit;
        const result = rule.leased
          ? await rateLimitLeases(app.store).enforce(`${rule.name}:${subject}`, limit, rule.windowSeconds)
          : await enforceRateLimit(app.store, `${rule.name}:${subject}`, limit, rule.windowSeconds);
        // Straight on the response: Koa's ctx.set normalises and validates each name and value first.
        const headers = rateLimitHeaders(result);
        for (const name in headers) ctx.res.setHeader(name, headers[name]!);
      }
      // Where the caller's identity alone decides (no resource id read from the input), a caller who may not call the
      // route is refused before anything about the input is said; otherwise the permission is checked on the validated input.
      if (authorizesFirst) await access.authorize(rc, route.access, NO_INPUT);
      const checked = validateWithFiles({ params, query: ctx.query, body: requestBody }, route, ctx);
      if (checksPermission && !authorizesFirst) await access.authorize(rc, route.access, checked.input);
      if (rc.preconditioned) {
        const current = await route.ifMatch!({ ...(checked.input as { params: never; query: never; body: never }), rc, app });
        assertIfMatch(ctx.get('if-match'), current);
      }
      return checked;
    };
    const { input, files } = await admit().catch(async (error: unknown) => {
      await idempotent?.abandon();
      throw error;
    });

    const handlerInput = { ...input, files, rc, app, ctx, idempotency } as never;
    // A write (a method that takes a body) that lost an optimistic-lock race (a concurrent writer — the edge moving an endpoint to active, a
    // token's last use — changed the record between its read and its update) runs again from the start on a
    // fresh unit of work, unless the client sent the route's If-Match: then the precondition failed (412). The
    // lost run's changes were rolled back, and what it does outside the database waits for the commit
    // (afterCommit) or is undone.
    const reruns = takesBody && !rc.preconditioned;
    const run = async (): Promise<SentReply & { etag?: string; contentType?: string }> => {
      for (let attempt = 1; ; attempt++) {
        let value: unknown;
        try {
          value = await route.handler(handlerInput);
        } catch (error) {
          if (!(reruns && error instanceof OptimisticLockError && attempt < CONFLICT_ATTEMPTS)) throw error;
          rc.discardEntityManager();
          continue;
        }
        const sent = present(route, value, fallbackStatus);
        if (sent.etag) sent.headers = { ...sent.headers, etag: sent.etag };
        return sent;
      }
    };

    const sent: SentReply & { contentType?: string } = idempotent ? await idempotent.run(run) : await run();

    if (etagged && sent.status === 200 && route.method === 'get' && ifNoneMatchHits(ctx.get('if-none-match'), sent.headers?.etag)) {
      ctx.status = 304;
      ctx.set('etag', sent.headers!.etag!);
      return;
    }
    const res = ctx.res;
    if (sent.headers) for (const name in sent.headers) res.setHeader(name, sent.headers[name]!);
    if (sent.body === undefined || sent.status === 204) {
      ctx.status = sent.status;
    } else if (sent.contentType) {
      // Bytes or a stream (files, archives): Koa's response handling streams them.
      ctx.status = sent.status;
      res.setHeader('content-type', sent.contentType);
      ctx.body = sent.body;
    } else {
      // JSON, written here rather than through Koa's body handling: one stringify, one write.
      const json = JSON.stringify(sent.body);
      res.statusCode = sent.status;
      res.setHeader('content-type', 'application/json; charset=utf-8');
      res.setHeader('content-length', Buffer.byteLength(json));
      ctx.respond = false;
      res.end(json);
    }
  };
}

/**
 * What a request's path and method found. `counted`: the route spends the
 * per-client budget (every declared /v1 route but readiness), decided on the
 * route matched, never on how the path was spelled (the router decodes
 * percent-encoding: `/%76%31/plans` is `/v1/plans`).
 */
export type RouteMatch =
  | { found: true; counted: boolean; run(): Promise<void> }
  /** No route has this method and path; `allow` lists the methods the path has (405), if any. */
  | { found: false; allow?: string };

export interface Router {
  /** Adds a plain handler (system endpoints: documents, metrics, pages), outside the per-client budget. */
  on(method: HttpMethod, path: string, handler: RequestHandler): void;
  /** The route of the request. */
  match(ctx: Context): RouteMatch;
}

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const;

/** Declared API routes spend the per-client budget; readiness probes do not. */
const countsAgainstBudget = (path: string) => path.startsWith('/v1/') && !path.startsWith('/v1/cdn/health/');

export function buildRouter<S extends HttpServices>(routes: readonly RouteDefinition<S>[], app: S, access: AccessControl): Router {
  const tree = FindMyWay({ caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false, maxParamLength: 256 });
  const add = (method: HttpMethod, path: string, handler: RequestHandler, counted: boolean) => {
    const store = { counted };
    tree.on(method.toUpperCase() as never, path, handler as never, store);
    // HEAD answers like GET (Koa sends no body for HEAD).
    if (method === 'get') tree.on('HEAD', path, handler as never, store);
  };
  // Declared routes label their metrics themselves (compile); plain handlers are labelled here.
  for (const route of routes) add(route.method, route.path, compile(route, app, access), countsAgainstBudget(route.path));
  const on = (method: HttpMethod, path: string, handler: RequestHandler) =>
    add(method, path, (ctx, params) => {
      (ctx.state as RequestState).routePath = path;
      return handler(ctx, params);
    }, false);

  return {
    on,
    match(ctx) {
      const found = tree.find(ctx.method as never, ctx.path);
      if (found) {
        const handler = found.handler as unknown as RequestHandler;
        const params = found.params as Record<string, string>;
        return { found: true, counted: (found.store as { counted: boolean }).counted, run: () => handler(ctx, params) };
      }
      if (METHODS.some((m) => m !== ctx.method && tree.find(m as never, ctx.path))) {
        return { found: false, allow: METHODS.filter((m) => tree.find(m as never, ctx.path)).join(', ') };
      }
      return { found: false };
    },
  };
}
