// One declaration per operation: method, path, access rule, schemas for
// params / query / body, the replies it may give (envelope + record), the
// error codes it may answer, idempotency, versioning and rate limits, and the
// handler. The router enforces the declaration: it validates the request,
// guards access, presents the reply through the declared record (the zod
// record *is* the presenter), sets ETags and checks If-Match for versioned
// resources, and in development and tests refuses a reply the declaration
// does not allow. openapi.ts walks the same declarations.
import { Readable } from 'node:stream';
import type { Context } from 'koa';
import { z } from 'zod';
import type { RequestContext } from '../core/request-context.ts';
import type { Permission } from '../permissions/catalog.ts';
import { etagFor } from './etag.ts';
import type { ErrorCode } from './errors.ts';
import type { HeaderParameter } from './headers.ts';
import { pageMeta, type PageMeta } from './paging.ts';

export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** The validated input of a request (what access rules and rate limits may look at). */
export interface RouteInput {
  params: any;
  query: any;
  body: any;
}

/**
 * Who may call a route. `public`: anyone; `authenticated`: any valid caller;
 * an object names the permission (and optional resource scope) the caller must
 * hold — evaluated against stored roles on every request.
 */
export type AccessRule =
  | 'public'
  | 'authenticated'
  | {
    permission: Permission;
    /** Resource type of a scoped check (type-scoped permissions satisfy it). */
    resourceType?: string;
    /** Resolves the resource id for an exact-scope check from the validated input. */
    resourceId?: (input: RouteInput) => string | undefined;
    /** Allow callers whose account is not yet verified (DESIGN.md §5). */
    allowUnverified?: boolean;
    /** Allow callers whose account is scheduled for deletion (during the grace period: read the account, cancel, export). */
    allowPendingDeletion?: boolean;
  };

export interface RateLimitRule<S = any> {
  /** Distinguishes the counter of this rule from others. */
  name: string;
  limit: number;
  windowSeconds: number;
  /**
   * What the budget belongs to: the client address, the caller, or a key derived
   * from the input (e.g. the e-mail, or a signed device cookie checked with a key
   * from `app`). undefined: the rule does not apply to this request.
   */
  by: 'ip' | 'caller' | ((input: RouteInput & { ctx: Context; app: S }) => string | undefined);
  /**
   * Taken from the shared store in blocks (a tenth of the limit) that this replica spends locally (rate-limit.ts,
   * RateLimitLeases): a round trip per block instead of per request, for hot routes with a large budget. The limit
   * holds across replicas; units a replica leased and did not spend are lost to the caller until the window ends.
   */
  leased?: boolean;
}

// ---- replies ----------------------------------------------------------------

/** How one success status is answered: the body schema (for OpenAPI and the check) and the presenter. */
export interface ResponseSpec<V = any> {
  readonly kind: 'data' | 'page' | 'bare' | 'empty' | 'binary';
  /** Schema of the body as sent; null for no body. */
  readonly schema: z.ZodType | null;
  /** Turns the handler's value into the body, validating it (throws z.ZodError when off the schema). */
  present(value: V): unknown;
  /** Strong ETag of a versioned resource's value. */
  readonly etag?: (value: V) => string;
  /** Media types of a binary reply (the body is bytes, not JSON). */
  readonly mediaTypes?: readonly string[];
  /** Phantom: the value type the handler returns for this status. */
  readonly __value?: V;
}

/**
 * A record that carries a version (optimistic locking): its single-record
 * replies get an ETag, and routes that update it check If-Match.
 */
export interface VersionedRecord<S extends z.ZodType> {
  readonly record: S;
  readonly versioned: true;
}

export type RecordLike = z.ZodType | VersionedRecord<z.ZodType>;
/** What a handler hands over for one record: the schema's input (entities fit: dates are Date, extra fields are dropped). */
export type ValueOf<R> = R extends VersionedRecord<infer S> ? z.input<S> & { id: string; version: number } : R extends z.ZodType ? z.input<R> : never;

export function versioned<S extends z.ZodType>(record: S): VersionedRecord<S> {
  return { record, versioned: true };
}

const recordOf = (r: RecordLike): z.ZodType => ('versioned' in r ? r.record : r);
const versionedEtag = (r: RecordLike) =>
  ('versioned' in r ? (value: { id: string; version: number }) => etagFor(value.id, value.version) : undefined);

/** `{data: record}` (account and auth single records). */
export function data<R extends RecordLike>(r: R): ResponseSpec<ValueOf<R>> {
  const record = recordOf(r);
  const schema = z.object({ data: record });
  return { kind: 'data', schema, present: (value) => ({ data: record.parse(value) }), etag: versionedEtag(r) as never };
}

/**
 * `{data: [record], meta}` (every list); the handler returns `{items, meta}` as
 * paginate() gives it. `extra` declares further top-level members the list
 * carries beside them (e.g. `unread_count`), which the handler returns beside
 * `items` and `meta`; they are checked and documented like the rest.
 */
export function page<R extends RecordLike, E extends z.ZodObject | undefined = undefined>(
  r: R,
  options: { extra?: E } = {},
): ResponseSpec<{ items: ValueOf<R>[]; meta: PageMeta } & (E extends z.ZodObject ? z.input<E> : unknown)> {
  const record = recordOf(r);
  const list = z.array(record);
  const extra = options.extra as z.ZodObject | undefined;
  // Members in the order the spec shows them: data, the extra ones, meta.
  const schema = z.object({ data: list, ...extra?.shape, meta: pageMeta });
  return {
    kind: 'page',
    schema,
    present: (value) => {
      const { items, meta, ...rest } = value as { items: unknown[]; meta: PageMeta };
      return { data: list.parse(items), ...(extra ? extra.strict().parse(rest) : {}), meta: pageMeta.parse(meta) };
    },
  };
}

/** `{data: [record]}`: a whole, unpaged list (sessions of the caller). */
export function list<R extends RecordLike>(r: R): ResponseSpec<ValueOf<R>[]> {
  const items = z.array(recordOf(r));
  const schema = z.object({ data: items });
  return { kind: 'data', schema, present: (value) => ({ data: items.parse(value) }) };
}

/** A bare record (CDN single records, and bodies the spec marks bare). */
export function bare<R extends RecordLike>(r: R): ResponseSpec<ValueOf<R>> {
  const record = recordOf(r);
  return { kind: 'bare', schema: record, present: (value) => record.parse(value), etag: versionedEtag(r) as never };
}

/** What a handler returns for a binary reply: the bytes (or a stream of them, e.g. a file) and their media type (one the route declares). */
export interface BinaryBody {
  contentType: string;
  body: Buffer | Readable;
}

/** Bytes rather than JSON (an avatar image, an export archive): `{contentType, body}` from the handler, one of `mediaTypes`. */
export function binary(mediaTypes: readonly [string, ...string[]]): ResponseSpec<BinaryBody> {
  return {
    kind: 'binary',
    schema: null,
    mediaTypes,
    present: (value) => {
      // Off the declaration is our bug, reported like a body off its schema.
      const check = z.object({ contentType: z.enum(mediaTypes as [string, ...string[]]), body: z.union([z.instanceof(Buffer), z.instanceof(Readable)]) });
      return check.parse(value).body;
    },
  };
}

/** No body (204). */
export const empty: ResponseSpec<void> = { kind: 'empty', schema: null, present: () => undefined };

/** A reply with an explicit status or headers; a handler may also return the bare value (lowest declared status). */
export class Reply<V = unknown> {
  readonly status: number;
  readonly value: V;
  readonly headers: Record<string, string> | undefined;
  constructor(status: number, value: V, headers?: Record<string, string>) {
    this.status = status;
    this.value = value;
    this.headers = headers;
  }
}

/** A presented reply, ready to write (and to record for idempotent replays). */
export interface SentReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export const reply = {
  with: <V>(status: number, value: V, headers?: Record<string, string>) => new Reply(status, value, headers),
  created: <V>(value: V, location: string, headers?: Record<string, string>) => new Reply(201, value, { location, ...headers }),
  accepted: <V>(value: V, headers?: Record<string, string>) => new Reply(202, value, headers),
  noContent: () => new Reply<void>(204, undefined),
};

// ---- the declaration ------------------------------------------------------

export type Responses = Record<number, ResponseSpec>;
type HandlerValue<R extends Responses> = { [K in keyof R]: R[K] extends ResponseSpec<infer V> ? V : never }[keyof R];

/** A file of a multipart request, held in memory (uploads are bounded by the route's maxFileBytes). */
export interface UploadedFile {
  /** The form field it came in. */
  field: string;
  /** The file name the client sent (untrusted; may be empty). */
  filename: string;
  /** The Content-Type the client declared for the part (untrusted; may be empty). */
  declaredType: string;
  size: number;
  bytes: Buffer;
}

/** A multipart route's file fields; each is one file. */
export interface MultipartSpec {
  /** Largest file accepted (bytes); above it the request gets 413 while it is still arriving. */
  maxFileBytes: number;
  /** The file fields the operation takes, by name. */
  files: Record<string, { required?: boolean; description?: string; /** Media types accepted (documentation; the handler decides by the bytes). */ mediaTypes?: string[] }>;
}

export interface HandlerInput<P, Q, B, S> {
  params: P;
  query: Q;
  body: B;
  /** The files of a multipart request, by field (the declared required ones are present). */
  files: Partial<Record<string, UploadedFile>>;
  /** The request context services take (actor, address, request id, unit of work, logger). */
  rc: RequestContext;
  /** The services of the composition root. */
  app: S;
  /** Koa's context, for what only HTTP has (cookies, response headers); services never receive it. */
  ctx: Context;
  /**
   * The request's Idempotency-Key on a route that claims it itself (`idempotent: 'statement'`), absent without the header:
   * `key` is the caller and the key's hash, `fingerprint` the request's (method, path, body).
   */
  idempotency?: StatementIdempotency;
}

/** An Idempotency-Key the handler claims in the statement that makes its change (see RouteDefinition.idempotent). */
export interface StatementIdempotency {
  key: string;
  fingerprint: string;
}

type Schema = z.ZodType;
type Infer<T> = T extends z.ZodType ? z.output<T> : undefined;

export interface RouteDefinition<S = any, P extends Schema | undefined = any, Q extends Schema | undefined = any, B extends Schema | undefined = any, R extends Responses = any> {
  method: HttpMethod;
  /** Path with `:name` parameters, e.g. `/v1/users/:user_id`. Matched case-sensitively. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  operationId?: string;
  access: AccessRule;
  params?: P;
  query?: Q;
  body?: B;
  /** multipart/form-data body: its file fields (handed over as `files`); the body schema then validates the text fields. */
  multipart?: MultipartSpec;
  /** Success replies by status. */
  responses: R;
  /** Error codes the operation may answer with beyond those every route may (see allowedErrorCodes). */
  errors?: ErrorCode[];
  /** Request headers the operation reads beyond the standard ones (listed in OpenAPI), e.g. X-Profile-Token. */
  headers?: readonly HeaderParameter[];
  /**
   * Honour the Idempotency-Key header (DESIGN.md §4): true claims the key in the shared store around the handler;
   * 'statement' hands it to the handler (`idempotency`), which claims it in the statement that makes its change (one
   * round trip for both; the purge submissions) and answers a replay or IDEMPOTENCY_KEY_REUSED itself.
   */
  idempotent?: boolean | 'statement';
  /**
   * The route updates a versioned resource: loads its current state so the
   * router can compare If-Match (412 before the handler runs). The handler's
   * later read of the same record comes from the identity map, and the
   * version check is repeated by the update itself (optimistic lock).
   */
  ifMatch?: (input: { params: Infer<P>; query: Infer<Q>; body: Infer<B>; rc: RequestContext; app: S }) => Promise<{ id: string; version: number }>;
  rateLimits?: RateLimitRule<S>[];
  handler: (input: HandlerInput<Infer<P>, Infer<Q>, Infer<B>, S>) => Promise<HandlerValue<R> | Reply<HandlerValue<R>>>;
}

/**
 * Declares a route of a capability whose services are S. Identity at run
 * time; keeps the schema types flowing into the handler and its replies.
 */
export function routesFor<S>() {
  return function defineRoute<P extends Schema | undefined = undefined, Q extends Schema | undefined = undefined, B extends Schema | undefined = undefined, R extends Responses = Responses>(
    definition: RouteDefinition<S, P, Q, B, R>,
  ): RouteDefinition<S, P, Q, B, R> {
    return definition;
  };
}

/** The error codes a route may answer: declared ones plus those its declaration implies. */
export function allowedErrorCodes(route: RouteDefinition): Set<ErrorCode> {
  const codes = new Set<ErrorCode>(route.errors ?? []);
  // Every route: malformed input (any route refuses unknown query fields and control characters),
  // unknown paths and records, the per-client budget, and failures that are not the caller's.
  for (const code of ['VALIDATION_ERROR', 'NOT_FOUND', 'RATE_LIMITED', 'INTERNAL_ERROR', 'SERVICE_UNAVAILABLE'] as const) codes.add(code);
  // Writes: a body the server refuses, and 409 when the record kept changing while the request ran (router: CONFLICT_ATTEMPTS).
  if (['post', 'put', 'patch', 'delete'].includes(route.method)) codes.add('PAYLOAD_TOO_LARGE').add('UNSUPPORTED_MEDIA_TYPE').add('CONFLICT');
  if (route.access !== 'public') codes.add('UNAUTHORIZED');
  if (typeof route.access === 'object') {
    codes.add('FORBIDDEN');
    if (!route.access.allowUnverified) codes.add('EMAIL_NOT_VERIFIED');
    if (!route.access.allowPendingDeletion) codes.add('ACCOUNT_PENDING_DELETION');
  }
  // 412 for a stale If-Match.
  if (route.ifMatch) codes.add('PRECONDITION_FAILED');
  if (route.idempotent) codes.add('IDEMPOTENCY_KEY_REUSED').add('IDEMPOTENCY_KEY_IN_USE');
  return codes;
}

const allowedCache = new WeakMap<RouteDefinition, Set<ErrorCode>>();

/** True for an error code beyond a route's declaration (a bug of ours, reported as such in development and tests). */
export function undeclaredError(route: RouteDefinition | undefined, code: ErrorCode): boolean {
  if (!route) return false;
  let allowed = allowedCache.get(route);
  if (!allowed) allowedCache.set(route, (allowed = allowedErrorCodes(route)));
  return !allowed.has(code);
}
