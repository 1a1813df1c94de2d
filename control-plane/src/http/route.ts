// One declaration per operation: method, path, access rule, schemas for
// params / query / body / response, the statuses it may return, and the
// handler. The same declaration validates requests (validation.ts), guards
// access (the authorize hook), drives idempotency and rate limits, and is
// walked to generate the OpenAPI document (openapi.ts).
import type { Context } from 'koa';
import type { z } from 'zod';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { ErrorCode } from './errors.ts';
import type { AppServices } from './services.ts';

export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';

/**
 * Who may call a route. `public`: anyone; `authenticated`: any valid caller;
 * an object names the permission (and optional resource scope) the caller must
 * hold — the auth module evaluates it against stored roles on every request.
 */
export type AccessRule =
  | 'public'
  | 'authenticated'
  | {
    permission: string;
    /** Resource type of a scoped check (type-scoped permissions satisfy it). */
    resourceType?: string;
    /** Resolves the resource id for an exact-scope check from the validated input. */
    resourceId?: (input: { params: any; query: any; body: any }) => string | undefined;
    /** Allow callers whose account is not yet verified (DESIGN.md §5). */
    allowUnverified?: boolean;
  };

export interface RateLimitRule {
  /** Distinguishes the counter of this rule from others. */
  name: string;
  limit: number;
  windowSeconds: number;
  /**
   * What the budget belongs to: the client address, or a key derived from the
   * input (e.g. the e-mail, or a signed device cookie checked with a key from `app`).
   * undefined: the rule does not apply to this request.
   */
  by: 'ip' | 'caller' | ((input: { params: any; query: any; body: any; ctx: Context; app: AppServices }) => string | undefined);
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface HandlerInput<P, Q, B> {
  params: P;
  query: Q;
  body: B;
  ctx: Context;
  /** Request-scoped entity manager (forked per request). */
  em: EntityManager;
  requestId: string;
  log: Logger;
  app: AppServices;
}

type Schema = z.ZodType;
type Infer<S> = S extends z.ZodType ? z.output<S> : undefined;

export interface RouteDefinition<P extends Schema | undefined = any, Q extends Schema | undefined = any, B extends Schema | undefined = any> {
  method: HttpMethod;
  /** Koa-router path, e.g. `/v1/users/:user_id`. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  operationId?: string;
  access: AccessRule;
  params?: P;
  query?: Q;
  body?: B;
  /** multipart/form-data body (the body schema then validates the text fields). */
  multipart?: { maxFileBytes: number };
  /** Success responses by status; a schema, or null for an empty body. */
  responses: Record<number, Schema | null>;
  /** Error codes the operation may answer with (documented in OpenAPI). */
  errors?: ErrorCode[];
  /** Honour the Idempotency-Key header (DESIGN.md §4). */
  idempotent?: boolean;
  /** Document and honour If-Match (the handler compares it against the record's ETag). */
  ifMatch?: boolean;
  rateLimits?: RateLimitRule[];
  handler: (input: HandlerInput<Infer<P>, Infer<Q>, Infer<B>>) => Promise<Reply>;
}

/** Identity function that keeps the schema types flowing into the handler. */
export function defineRoute<P extends Schema | undefined = undefined, Q extends Schema | undefined = undefined, B extends Schema | undefined = undefined>(
  definition: RouteDefinition<P, Q, B>,
): RouteDefinition<P, Q, B> {
  return definition;
}

// Reply builders: the envelopes of DESIGN.md §4.
export const reply = {
  /** `{data}` (account and auth APIs). */
  data: (data: unknown, headers?: Record<string, string>): Reply => ({ status: 200, body: { data }, headers }),
  /** 201 `{data}` with Location. */
  created: (data: unknown, location: string, headers?: Record<string, string>): Reply => ({ status: 201, body: { data }, headers: { location, ...headers } }),
  /** A bare record (CDN API single records, and bodies the spec marks bare). */
  bare: (body: unknown, status = 200, headers?: Record<string, string>): Reply => ({ status, body, headers }),
  /** `{data, meta}` list page. */
  list: (data: unknown[], meta: unknown, extra?: Record<string, unknown>): Reply => ({ status: 200, body: { data, ...extra, meta } }),
  accepted: (body: unknown, headers?: Record<string, string>): Reply => ({ status: 202, body, headers }),
  noContent: (): Reply => ({ status: 204 }),
};
