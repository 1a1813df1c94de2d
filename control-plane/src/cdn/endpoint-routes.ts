// Endpoints and their distribution aliases (document 3 §4.1; DESIGN.md §5,
// §6). A distribution is an endpoint: list, create, read, update and delete
// are one implementation each, registered under both paths.
import { z } from 'zod';
import { bare, empty, page, reply, type RouteDefinition } from '../http/route.ts';
import { ENDPOINT_STATUSES, Endpoint } from './cdn.entities.ts';
import { createEndpointBody, EDGE_REQUEST_ORDER, EDGE_RESPONSE_ORDER, endpointRecord, endpointResource, updateEndpointBody } from './endpoint-record.ts';
import { createEndpoint, deleteEndpoint, findEndpoint, setEndpointEnabled, updateEndpoint } from './endpoint-service.ts';
import { idParams, listResources, topLevelQuery } from './fields.ts';
import { defineCdnRoute as defineRoute, type CdnServices } from './services.ts';

const tags = ['CDN: endpoints'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const aliasNote = ' A distribution is the same resource: `/v1/cdn/distributions` answers alike.';

export const listEndpointsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/endpoints', tags, access: read,
  summary: 'List endpoints',
  description: `Newest first by default; \`sort\` by created_at, updated_at or name (\`-\` for descending); \`q\` searches names, hostnames and tags.${aliasNote}`,
  query: topLevelQuery(['created_at', 'updated_at', 'name'], { status: z.enum(ENDPOINT_STATUSES).optional() }),
  responses: { 200: page(endpointRecord) },
  async handler({ query, rc }) {
    return listResources(rc, Endpoint, query.status ? { status: query.status } : {}, query);
  },
});

export const createEndpointRoute = defineRoute({
  method: 'post', path: '/v1/cdn/endpoints', tags, access: write, idempotent: true,
  summary: 'Create an endpoint',
  description: 'Assigns a hostname `<label>.<CDN_DOMAIN>`; the endpoint is `deploying` until the edge nodes have it. default_origin_id must name an enabled origin '
    + 'that belongs to no other endpoint; it joins this one. shield_region, when given, must be one of the shield regions (the regions the edge nodes report). Refused with 422 INVALID_CONFIGURATION (nothing stored) when the configuration would be invalid. '
    + `Audit-logged. ${EDGE_REQUEST_ORDER} ${EDGE_RESPONSE_ORDER}${aliasNote}`,
  body: createEndpointBody,
  responses: { 201: bare(endpointResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ body, rc, app }) {
    const endpoint = await createEndpoint(rc, body, app.config.CDN_DOMAIN, app.cdnShieldRegions);
    return reply.created(endpoint, `/v1/cdn/endpoints/${endpoint.id}`);
  },
});

export const readEndpointRoute = defineRoute({
  method: 'get', path: '/v1/cdn/endpoints/:id', tags, access: read,
  summary: 'Read an endpoint', description: `With a strong ETag for If-Match.${aliasNote}`,
  params: idParams,
  responses: { 200: bare(endpointResource) },
  async handler({ params, rc }) {
    return findEndpoint(rc, params.id);
  },
});

export const updateEndpointRoute = defineRoute({
  method: 'patch', path: '/v1/cdn/endpoints/:id', tags, access: write,
  summary: 'Update an endpoint',
  description: 'Partial: only sent fields change; inside tls_config, compression and geo_restriction only sent members change. response_headers_policy_id and '
    + 'shield_region may be null, otherwise one of the shield regions (the regions the edge nodes report; 422 otherwise). A change the edge sees (anything but tags) moves the endpoint to `deploying` (a disabled one stays disabled); a tags-only change leaves its status as it is. With a stale If-Match: 412, nothing changes. '
    + `Audit-logged. ${EDGE_REQUEST_ORDER} ${EDGE_RESPONSE_ORDER}${aliasNote}`,
  params: idParams,
  body: updateEndpointBody,
  ifMatch: ({ params, rc }) => findEndpoint(rc, params.id),
  responses: { 200: bare(endpointResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc, app }) {
    return updateEndpoint(rc, params.id, body, app.cdnShieldRegions);
  },
});

export const deleteEndpointRoute = defineRoute({
  method: 'delete', path: '/v1/cdn/endpoints/:id', tags, access: write,
  summary: 'Delete an endpoint',
  description: 'Removes the endpoint with its origins, routes and cache rules; irreversible, the hostname is released. Refused with 409 RESOURCE_IN_USE while '
    + `custom domains remain. Audit-logged.${aliasNote}`,
  params: idParams,
  responses: { 204: empty },
  errors: ['RESOURCE_IN_USE'],
  async handler({ params, rc }) {
    await deleteEndpoint(rc, params.id);
    return reply.noContent();
  },
});

const toggle = (enabled: boolean) => defineRoute({
  method: 'post', path: `/v1/cdn/endpoints/:id/${enabled ? 'enable' : 'disable'}`, tags, access: write,
  summary: enabled ? 'Enable an endpoint' : 'Disable an endpoint',
  description: enabled
    ? 'A disabled endpoint returns to `deploying` (serving again once the edge nodes have it); any other status is left as it is. Audit-logged.'
    : 'Status `disabled`: the edge stops serving it (403); configuration and custom domains are kept. Audit-logged.',
  params: idParams,
  responses: { 200: bare(endpointResource) },
  async handler({ params, rc }) {
    return setEndpointEnabled(rc, params.id, enabled);
  },
});

/** The same operation under /v1/cdn/distributions (one implementation, both paths in OpenAPI). */
export function distributionAlias<R extends RouteDefinition<CdnServices>>(route: R): R {
  return { ...route, path: route.path.replace('/v1/cdn/endpoints', '/v1/cdn/distributions') };
}

const aliased = [listEndpointsRoute, createEndpointRoute, readEndpointRoute, updateEndpointRoute, deleteEndpointRoute];
export const endpointRoutes = [...aliased, toggle(false), toggle(true), ...aliased.map(distributionAlias)];
