// The operations routes and cache rules share (document 3 §4.3, §4.4): top-level
// list (sort, q, filters) and create, distribution-scoped list (by priority)
// and create, read, partial update with If-Match, delete, enable and disable.
// One declaration set per resource, built from its record, bodies and service.
import type { EntityName } from '@mikro-orm/core';
import { z } from 'zod';
import type { RequestContext } from '../core/request-context.ts';
import { bare, empty, page, reply, type VersionedRecord } from '../http/route.ts';
import { findEndpoint } from './endpoint-service.ts';
import { distributionParams, idParams, listResources, scopedQuery, topLevelQuery } from './fields.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

export interface ChildService<E, C, U> {
  find(rc: RequestContext, id: string): Promise<E>;
  create(rc: RequestContext, input: C, distributionId: string | null): Promise<E>;
  update(rc: RequestContext, id: string, input: U): Promise<E>;
  setEnabled(rc: RequestContext, id: string, enabled: boolean): Promise<E>;
  remove(rc: RequestContext, id: string): Promise<void>;
}

export interface ChildResource<E extends { id: string }, C, U, F extends z.ZodRawShape> {
  /** `route`, `cache rule`. */
  noun: string;
  /** Path segment: `routes`, `cache-rules`. */
  segment: string;
  tag: string;
  entity: EntityName<E>;
  record: z.ZodType;
  resource: VersionedRecord<z.ZodType>;
  present: (e: E) => any;
  sortFields: readonly ['created_at', ...string[]];
  filters: F;
  where: (query: z.output<z.ZodObject<F>>) => Record<string, unknown>;
  createBody: z.ZodType<C>;
  createTopLevelBody: z.ZodType<C & { distribution_id?: string }>;
  updateBody: z.ZodType<U>;
  /** What the create descriptions add (required fields, 422 cases). */
  rules: string;
  service: ChildService<E, C, U>;
}

export function childRoutes<E extends { id: string }, C, U, F extends z.ZodRawShape>(r: ChildResource<E, C, U, F>) {
  const tags = [r.tag];
  const read = { permission: 'cdn.read' } as const;
  const write = { permission: 'cdn.write' } as const;
  const base = `/v1/cdn/${r.segment}`;
  const presentPage = (found: { items: E[]; meta: any }) => ({ items: found.items.map(r.present), meta: found.meta });
  const created = (e: E) => reply.created(r.present(e), `${base}/${e.id}`);

  const list = defineRoute({
    method: 'get', path: base, tags, access: read,
    summary: `List ${r.noun}s`,
    description: `Newest first by default; \`sort\` by ${r.sortFields.join(', ')} (\`-\` for descending); \`q\` searches names.`,
    query: topLevelQuery(r.sortFields, r.filters),
    responses: { 200: page(r.record) },
    async handler({ query, rc }) {
      return presentPage(await listResources(rc, r.entity, r.where(query as never), query as never));
    },
  });
  const create = defineRoute({
    method: 'post', path: base, tags, access: write, idempotent: true,
    summary: `Create a ${r.noun}`, description: `${r.rules} Audit-logged.`,
    body: r.createTopLevelBody,
    responses: { 201: bare(r.resource) },
    errors: ['INVALID_CONFIGURATION'],
    async handler({ body, rc }) {
      return created(await r.service.create(rc, body, body.distribution_id ?? null));
    },
  });
  const listScoped = defineRoute({
    method: 'get', path: `/v1/cdn/distributions/:id/${r.segment}`, tags, access: read,
    summary: `List the ${r.noun}s of a distribution`, description: 'In evaluation order: lowest priority value first, then oldest.',
    params: distributionParams, query: scopedQuery(),
    responses: { 200: page(r.record) },
    async handler({ params, query, rc }) {
      await findEndpoint(rc, params.id);
      return presentPage(await listResources(rc, r.entity, { distribution: params.id }, { ...query, sort: { field: 'priority', direction: 'asc' } }));
    },
  });
  const createScoped = defineRoute({
    method: 'post', path: `/v1/cdn/distributions/:id/${r.segment}`, tags, access: write, idempotent: true,
    summary: `Create a ${r.noun} of a distribution`, description: `${r.rules} Audit-logged.`,
    params: distributionParams, body: r.createBody,
    responses: { 201: bare(r.resource) },
    errors: ['INVALID_CONFIGURATION'],
    async handler({ params, body, rc }) {
      await findEndpoint(rc, params.id);
      return created(await r.service.create(rc, body, params.id));
    },
  });
  const readOne = defineRoute({
    method: 'get', path: `${base}/:id`, tags, access: read,
    summary: `Read a ${r.noun}`, description: 'With a strong ETag for If-Match.',
    params: idParams,
    responses: { 200: bare(r.resource) },
    async handler({ params, rc }) {
      return r.present(await r.service.find(rc, params.id));
    },
  });
  const update = defineRoute({
    method: 'patch', path: `${base}/:id`, tags, access: write,
    summary: `Update a ${r.noun}`,
    description: `Partial: only sent fields change (inside match and the other objects, only sent members). With a stale If-Match: 412, nothing changes. ${r.rules} Audit-logged.`,
    params: idParams, body: r.updateBody,
    ifMatch: ({ params, rc }) => r.service.find(rc, params.id) as never,
    responses: { 200: bare(r.resource) },
    errors: ['INVALID_CONFIGURATION'],
    async handler({ params, body, rc }) {
      return r.present(await r.service.update(rc, params.id, body));
    },
  });
  const remove = defineRoute({
    method: 'delete', path: `${base}/:id`, tags, access: write,
    summary: `Delete a ${r.noun}`, description: 'Audit-logged.',
    params: idParams,
    responses: { 204: empty },
    async handler({ params, rc }) {
      await r.service.remove(rc, params.id);
      return reply.noContent();
    },
  });
  const toggle = (enabled: boolean) => defineRoute({
    method: 'post', path: `${base}/:id/${enabled ? 'enable' : 'disable'}`, tags, access: write,
    summary: `${enabled ? 'Enable' : 'Disable'} a ${r.noun}`,
    description: enabled ? `Refused with 422 INVALID_CONFIGURATION when the enabled ${r.noun} would be invalid. Audit-logged.` : 'The edge ignores it until it is enabled again. Audit-logged.',
    params: idParams,
    responses: { 200: bare(r.resource) },
    errors: enabled ? ['INVALID_CONFIGURATION'] : [],
    async handler({ params, rc }) {
      return r.present(await r.service.setEnabled(rc, params.id, enabled));
    },
  });
  return [list, create, listScoped, createScoped, readOne, update, remove, toggle(false), toggle(true)];
}
