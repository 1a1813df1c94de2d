// Response header policies (document 3 §4.7): top-level list (sort, q) and
// create, read, partial update (If-Match), delete; per distribution, the
// policies it uses and a create that makes the new policy the endpoint's own.
import { bare, empty, page, reply } from '../http/route.ts';
import { findEndpoint } from './endpoint-service.ts';
import { distributionParams, idParams, listResources, scopedQuery, topLevelQuery } from './fields.ts';
import { createHeaderPolicyBody, headerPolicyRecord, headerPolicyResource, updateHeaderPolicyBody } from './header-policy-record.ts';
import {
  createDistributionHeaderPolicy, createHeaderPolicy, deleteHeaderPolicy, distributionPolicyIds, findHeaderPolicy, updateHeaderPolicy,
} from './header-policy-service.ts';
import { ResponseHeadersPolicy } from './policies.entities.ts';
import { defineCdnRoute as defineRoute } from './services.ts';

const tags = ['CDN: response headers policies'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const base = '/v1/cdn/response-headers-policies';
const rules = 'name required; every other member has a default (override flags true: replace the origin\'s header; false: only fill a missing one). '
  + 'Header names must be HTTP tokens, values single lines; hop-by-hop and framing headers (Connection, Transfer-Encoding, Host …) are refused with 400. '
  + 'Refused with 422 INVALID_CONFIGURATION when the merged policy cannot be served: CORS credentials with the origin "*", HSTS preload without '
  + 'include_subdomains and a year\'s max age, an enabled CSP or permissions policy without its policy, a header both set and removed.';

export const listHeaderPoliciesRoute = defineRoute({
  method: 'get', path: base, tags, access: read,
  summary: 'List response headers policies',
  description: 'Newest first by default; `sort` by created_at, updated_at or name (`-` for descending); `q` searches names and descriptions.',
  query: topLevelQuery(['created_at', 'updated_at', 'name'], {}),
  responses: { 200: page(headerPolicyRecord) },
  async handler({ query, rc }) {
    return listResources(rc, ResponseHeadersPolicy, {}, query);
  },
});

export const createHeaderPolicyRoute = defineRoute({
  method: 'post', path: base, tags, access: write, idempotent: true,
  summary: 'Create a response headers policy', description: `${rules} Audit-logged.`,
  body: createHeaderPolicyBody,
  responses: { 201: bare(headerPolicyResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ body, rc }) {
    const policy = await createHeaderPolicy(rc, body);
    return reply.created(policy, `${base}/${policy.id}`);
  },
});

export const listDistributionHeaderPoliciesRoute = defineRoute({
  method: 'get', path: '/v1/cdn/distributions/:id/response-headers-policies', tags, access: read,
  summary: 'List the response headers policies a distribution uses',
  description: 'The endpoint\'s own policy and those of its routes, oldest first.',
  params: distributionParams, query: scopedQuery(),
  responses: { 200: page(headerPolicyRecord) },
  async handler({ params, query, rc }) {
    await findEndpoint(rc, params.id);
    const ids = await distributionPolicyIds(rc, params.id);
    return listResources(rc, ResponseHeadersPolicy, { id: { $in: ids } }, { ...query, sort: { field: 'created_at', direction: 'asc' } });
  },
});

export const createDistributionHeaderPolicyRoute = defineRoute({
  method: 'post', path: '/v1/cdn/distributions/:id/response-headers-policies', tags, access: write, idempotent: true,
  summary: 'Create a response headers policy for a distribution',
  description: `Creates the policy and makes it the endpoint's response_headers_policy_id (replacing any policy it had, which is kept), in one step; `
    + `the endpoint moves to \`deploying\`. ${rules} Both changes are audit-logged.`,
  params: distributionParams, body: createHeaderPolicyBody,
  responses: { 201: bare(headerPolicyResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc }) {
    await findEndpoint(rc, params.id);
    const policy = await createDistributionHeaderPolicy(rc, params.id, body);
    return reply.created(policy, `${base}/${policy.id}`);
  },
});

export const readHeaderPolicyRoute = defineRoute({
  method: 'get', path: `${base}/:id`, tags, access: read,
  summary: 'Read a response headers policy', description: 'With a strong ETag for If-Match.',
  params: idParams,
  responses: { 200: bare(headerPolicyResource) },
  async handler({ params, rc }) {
    return findHeaderPolicy(rc, params.id);
  },
});

export const updateHeaderPolicyRoute = defineRoute({
  method: 'patch', path: `${base}/:id`, tags, access: write,
  summary: 'Update a response headers policy',
  description: 'Partial: only sent fields change; inside cors and each security header only sent members change; header lists are replaced whole. '
    + `Applies to every endpoint and route that refers to it. With a stale If-Match: 412, nothing changes. ${rules} Audit-logged.`,
  params: idParams, body: updateHeaderPolicyBody,
  ifMatch: ({ params, rc }) => findHeaderPolicy(rc, params.id),
  responses: { 200: bare(headerPolicyResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc }) {
    return updateHeaderPolicy(rc, params.id, body);
  },
});

export const deleteHeaderPolicyRoute = defineRoute({
  method: 'delete', path: `${base}/:id`, tags, access: write,
  summary: 'Delete a response headers policy',
  description: 'Refused with 409 RESOURCE_IN_USE while an endpoint or a route refers to it. Audit-logged.',
  params: idParams,
  responses: { 204: empty },
  errors: ['RESOURCE_IN_USE'],
  async handler({ params, rc }) {
    await deleteHeaderPolicy(rc, params.id);
    return reply.noContent();
  },
});

export const headerPolicyRoutes = [
  listHeaderPoliciesRoute, createHeaderPolicyRoute, listDistributionHeaderPoliciesRoute, createDistributionHeaderPolicyRoute, readHeaderPolicyRoute,
  updateHeaderPolicyRoute, deleteHeaderPolicyRoute,
];
