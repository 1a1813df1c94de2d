// Origins (document 3 §4.2): top-level and distribution-scoped lists and
// creates, read, partial update (If-Match), delete, enable/disable and health.
import { z } from 'zod';
import { bare, empty, page, reply } from '../http/route.ts';
import { queryBoolean } from '../http/schemas.ts';
import { HEALTH_STATUSES, Origin } from './cdn.entities.ts';
import { findEndpoint } from './endpoint-service.ts';
import { distributionParams, idParams, listResources, scopedQuery, topLevelQuery } from './fields.ts';
import { createOriginBody, createTopLevelOriginBody, originHealthRecord, originRecord, originResource, presentOrigin, updateOriginBody } from './origin-record.ts';
import { createOrigin, deleteOrigin, findOrigin, originHealth, setOriginEnabled, updateOrigin } from './origin-service.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

const tags = ['CDN: origins'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const presentPage = (found: { items: Origin[]; meta: any }) => ({ items: found.items.map(presentOrigin), meta: found.meta });
const ssrfNote = 'The host is refused with 422 INVALID_CONFIGURATION when it is, or resolves to, a private-use address (loopback, RFC 1918, CGNAT, IPv6 ULA) '
  + 'unless allow_private_network is true, or a link-local, metadata or reserved address unless allow_private_network is true and ssrf_protection false; '
  + 'every spelling of an address counts (2130706433, 0x7f.1, 0177.0.0.1, 127.1, ::ffff:127.0.0.1, 64:ff9b::…). A name that does not resolve is accepted. '
  + 'custom_headers values are never shown ("***"). Audit-logged.';

export const listOriginsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/origins', tags, access: read,
  summary: 'List origins',
  description: 'Newest first by default; `sort` by created_at, updated_at, name or host; `q` searches names, hosts and tags.',
  query: topLevelQuery(['created_at', 'updated_at', 'name', 'host'], { enabled: queryBoolean().optional(), health_status: z.enum(HEALTH_STATUSES).optional() }),
  responses: { 200: page(originRecord) },
  async handler({ query, rc }) {
    const where: Record<string, unknown> = {};
    if (query.enabled !== undefined) where.enabled = query.enabled;
    if (query.health_status) where.health_status = query.health_status;
    return presentPage(await listResources(rc, Origin, where, query));
  },
});

export const createOriginRoute = defineRoute({
  method: 'post', path: '/v1/cdn/origins', tags, access: write, idempotent: true,
  summary: 'Create an origin',
  description: `name and host (or url) required; distribution_id optional (the origin then joins the first endpoint or route that uses it). ${ssrfNote}`,
  body: createTopLevelOriginBody,
  responses: { 201: bare(originResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ body, rc, app }) {
    const origin = await createOrigin(app, rc, body, body.distribution_id ?? null);
    return reply.created(presentOrigin(origin), `/v1/cdn/origins/${origin.id}`);
  },
});

export const listDistributionOriginsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/distributions/:id/origins', tags, access: read,
  summary: 'List the origins of a distribution', description: 'Oldest first.',
  params: distributionParams, query: scopedQuery(),
  responses: { 200: page(originRecord) },
  async handler({ params, query, rc }) {
    await findEndpoint(rc, params.id);
    return presentPage(await listResources(rc, Origin, { distribution: params.id }, { ...query, sort: { field: 'created_at', direction: 'asc' } }));
  },
});

export const createDistributionOriginRoute = defineRoute({
  method: 'post', path: '/v1/cdn/distributions/:id/origins', tags, access: write, idempotent: true,
  summary: 'Create an origin of a distribution', description: `name and host (or url) required. ${ssrfNote}`,
  params: distributionParams, body: createOriginBody,
  responses: { 201: bare(originResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc, app }) {
    await findEndpoint(rc, params.id);
    const origin = await createOrigin(app, rc, body, params.id);
    return reply.created(presentOrigin(origin), `/v1/cdn/origins/${origin.id}`);
  },
});

export const readOriginRoute = defineRoute({
  method: 'get', path: '/v1/cdn/origins/:id', tags, access: read,
  summary: 'Read an origin', description: 'custom_headers values show as "***". With a strong ETag for If-Match.',
  params: idParams,
  responses: { 200: bare(originResource) },
  async handler({ params, rc }) {
    return presentOrigin(await findOrigin(rc, params.id));
  },
});

export const updateOriginRoute = defineRoute({
  method: 'patch', path: '/v1/cdn/origins/:id', tags, access: write,
  summary: 'Update an origin',
  description: 'Partial: only sent fields change; health_check_url may be null; custom_headers replaces the set, and a value of "***" keeps that header\'s stored '
    + `value. Disabling an origin that an enabled route or an endpoint's default_origin_id uses is refused with 422. With a stale If-Match: 412. ${ssrfNote}`,
  params: idParams, body: updateOriginBody,
  ifMatch: ({ params, rc }) => findOrigin(rc, params.id),
  responses: { 200: bare(originResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc, app }) {
    return presentOrigin(await updateOrigin(app, rc, params.id, body));
  },
});

export const deleteOriginRoute = defineRoute({
  method: 'delete', path: '/v1/cdn/origins/:id', tags, access: write,
  summary: 'Delete an origin',
  description: 'Refused with 409 RESOURCE_IN_USE while a route (enabled or not) or an endpoint\'s default_origin_id refers to it. Audit-logged.',
  params: idParams,
  responses: { 204: empty },
  errors: ['RESOURCE_IN_USE'],
  async handler({ params, rc }) {
    await deleteOrigin(rc, params.id);
    return reply.noContent();
  },
});

const toggle = (enabled: boolean) => defineRoute({
  method: 'post', path: `/v1/cdn/origins/:id/${enabled ? 'enable' : 'disable'}`, tags, access: write,
  summary: enabled ? 'Enable an origin' : 'Disable an origin',
  description: enabled ? 'Audit-logged.' : 'Refused with 422 INVALID_CONFIGURATION while an enabled route or an endpoint\'s default_origin_id uses it. Audit-logged.',
  params: idParams,
  responses: { 200: bare(originResource) },
  errors: enabled ? [] : ['INVALID_CONFIGURATION'],
  async handler({ params, rc }) {
    return presentOrigin(await setOriginEnabled(rc, params.id, enabled));
  },
});

export const originHealthRoute = defineRoute({
  method: 'get', path: '/v1/cdn/origins/:id/health', tags, access: read,
  summary: 'Read an origin\'s health',
  description: 'The worst case over the probes of the edge nodes online now: status unhealthy > degraded > healthy > unknown, the highest latency_ms '
    + 'and consecutive_failures, the latest last_success_at, last_failure_at and checked_at, and the failure_reason of a worst node. '
    + 'While no online node reports the origin, status is `unknown` and the measurements are null. The origin\'s health_status is the same status.',
  params: idParams,
  responses: { 200: bare(originHealthRecord) },
  async handler({ params, rc, app }) {
    return originHealth(app, rc, params.id);
  },
});

export const originRoutes = [
  listOriginsRoute, createOriginRoute, listDistributionOriginsRoute, createDistributionOriginRoute, readOriginRoute, updateOriginRoute, deleteOriginRoute,
  toggle(false), toggle(true), originHealthRoute,
];
