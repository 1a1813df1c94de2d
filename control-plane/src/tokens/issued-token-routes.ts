// The five operations of an issued-token resource (API tokens, agent tokens):
// list, create, read, revoke (DELETE) and rotate, under one base path, behind
// one permission. Both resources are the same machinery (issued-tokens.ts):
// values shown once (create and rotate), only their hash stored, revoked and
// rotated atomically, audit-logged without values. What differs is declared
// by each resource: its names, records, body, services and what its token is
// for. Single records are bare, lists `{data, meta}`.
import type { EntityManager, EntityName, FilterQuery } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { RequestContext } from '../core/request-context.ts';
import { paginate } from '../http/paging.ts';
import { bare, empty, page, reply, routesFor, type RecordLike, type RouteDefinition, type ValueOf } from '../http/route.ts';
import { pageQuery, sortParam, uuid } from '../http/schemas.ts';
import type { Permission } from '../permissions/catalog.ts';

export interface IssuedTokenRoutesSpec<S, T extends ValueOf<L> & object, B extends z.ZodType, L extends RecordLike, R extends RecordLike, I extends RecordLike> {
  /** The collection, e.g. `/v1/cdn/api-tokens`. */
  path: string;
  tags: string[];
  permission: Permission;
  /** The token's name in summaries: `API token`, `agent token`. */
  noun: string;
  /** The entity listed (paginate) and the statuses a list may filter on. */
  entity: EntityName<T>;
  statuses: readonly [string, ...string[]];
  /** The list's record, the single record, and the record plus its value (create, rotate). */
  records: { list: L; single: R; issued: I };
  createBody: B;
  /** Whether create honours Idempotency-Key (a replay repeats the reply, value included). */
  idempotentCreate: boolean;
  /** What each operation's description says beyond what every issued token shares; `every` ends all five. */
  describe: { create: string; revoke: string; rotate: string; every?: string };
  service: {
    create(app: S, rc: RequestContext, body: z.output<B>): Promise<ValueOf<I> & { id: string }>;
    find(em: EntityManager, id: string): Promise<ValueOf<R>>;
    revoke(app: S, rc: RequestContext, id: string): Promise<unknown>;
    rotate(app: S, rc: RequestContext, id: string): Promise<ValueOf<I>>;
  };
}

const tokenParams = z.strictObject({ token_id: uuid() });
const join = (...parts: (string | undefined)[]) => parts.filter((p) => p !== undefined && p !== '').join(' ');

/** The resource's five routes, in the order list, create, read, revoke, rotate. */
export function issuedTokenRoutes<S, T extends ValueOf<L> & object, B extends z.ZodType, L extends RecordLike, R extends RecordLike, I extends RecordLike>(
  spec: IssuedTokenRoutesSpec<S, T, B, L, R, I>,
): RouteDefinition<S>[] {
  const defineRoute = routesFor<S>();
  const { path, tags, noun, service } = spec;
  const access = { permission: spec.permission } as const;
  const item = `${path}/:token_id`;
  const article = /^[aeiou]/i.test(noun) ? 'an' : 'a';
  return [
    defineRoute({
      method: 'get', path, tags, access,
      summary: `List ${noun}s`,
      description: join('Newest first by default. Values are never returned (only create and rotate show one, once).', spec.describe.every),
      query: pageQuery({
        status: z.enum(spec.statuses).optional(),
        sort: sortParam(['created_at', 'name'], '-created_at'),
      }),
      responses: { 200: page(spec.records.list) },
      async handler({ query, rc }) {
        // Both token entities have a status column (issued-token-columns.ts); the generic T cannot say so to MikroORM.
        const where = (query.status ? { status: query.status } : {}) as FilterQuery<T>;
        return paginate(rc.em, spec.entity, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
      },
    }),
    defineRoute({
      method: 'post', path, tags, access, idempotent: spec.idempotentCreate,
      summary: `Create ${article} ${noun}`,
      description: join('Answers the record plus `token`, the value, this once (only its hash is stored).', spec.describe.create, spec.describe.every),
      body: spec.createBody,
      responses: { 201: bare(spec.records.issued) },
      async handler({ body, rc, app }) {
        const token = await service.create(app, rc, body as z.output<B>);
        return reply.created(token, `${path}/${token.id}`);
      },
    }),
    defineRoute({
      method: 'get', path: item, tags, access,
      summary: `Read ${article} ${noun}`, description: join('Without its value.', spec.describe.every),
      params: tokenParams,
      responses: { 200: bare(spec.records.single) },
      async handler({ params, rc }) {
        return service.find(rc.em, params.token_id);
      },
    }),
    defineRoute({
      method: 'delete', path: item, tags, access,
      summary: `Revoke ${article} ${noun}`,
      description: join(spec.describe.revoke, 'The record stays (status revoked) for the audit trail. A token already revoked is a 409. Audit-logged.', spec.describe.every),
      params: tokenParams,
      responses: { 204: empty },
      errors: ['CONFLICT'],
      async handler({ params, rc, app }) {
        await service.revoke(app, rc, params.token_id);
        return reply.noContent();
      },
    }),
    defineRoute({
      method: 'post', path: `${item}/rotate`, tags, access,
      summary: `Rotate ${article} ${noun}`,
      description: join(spec.describe.rotate, 'Answers the new record plus its value, once; the old record names it in `replaced_by`. '
        + 'A revoked or expired token cannot be rotated (409). Audit-logged without values.', spec.describe.every),
      params: tokenParams,
      responses: { 200: bare(spec.records.issued) },
      errors: ['CONFLICT'],
      async handler({ params, rc, app }) {
        return service.rotate(app, rc, params.token_id);
      },
    }),
  ];
}
