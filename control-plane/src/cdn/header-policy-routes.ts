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
  + 'Refused with 422 INVALID_CONFIGURATION, by the same rules the edge runs on every configuration it receives, when the merged policy cannot be '
  + 'served: CORS credentials with the origin "*", HSTS preload without include_subdomains and a year\'s max age, an enabled CSP or permissions policy '
  + 'without its policy, a header both set and removed.';
/** What the edge does with a policy (policy/headers.ts and cors.ts in the agent). */
const atTheEdge = 'At the edge, on every answer of each endpoint and route that refers to the policy (a route\'s policy replaces its endpoint\'s; '
  + 'after a custom error page and compression, see the endpoint operations): 1. remove_response_headers are dropped; 2. the enabled security headers '
  + 'are set (strict_transport_security as "max-age=N; includeSubDomains; preload", on answers to viewers who came over HTTPS only (RFC 6797 §7.2), content_security_policy as Content-Security-Policy or, with '
  + 'report_only, Content-Security-Policy-Report-Only, x_content_type_options as "nosniff", x_frame_options, referrer_policy, permissions_policy and '
  + 'x_xss_protection with their values), then custom_response_headers (one naming the same field wins); override true replaces the origin\'s field, '
  + 'false only fills a missing one; 3. CORS: allow_origins ["*"] without credentials sends Access-Control-Allow-Origin: * on every answer; listed '
  + 'origins (exact, or https://*.example.com for every subdomain) are echoed when the viewer\'s Origin is one of them, with '
  + 'Access-Control-Allow-Credentials: true when allow_credentials, and every answer carries Vary: Origin; expose_headers go out as '
  + 'Access-Control-Expose-Headers. override_origin true replaces the origin\'s Access-Control-Allow-Origin, -Allow-Credentials and -Expose-Headers; '
  + 'false keeps an origin answer that has Access-Control-Allow-Origin as it is. Preflights (OPTIONS with Origin and Access-Control-Request-Method) are '
  + 'answered by the edge and never forwarded: 204 with Access-Control-Allow-Methods (allow_methods, default GET and HEAD), -Allow-Headers and -Max-Age '
  + '(max_age_seconds) when the origin, the method and the requested headers are allowed, 403 otherwise. custom_request_headers (override false: only '
  + 'when the viewer sent none) and remove_request_headers change every request forwarded to the origin, cache fills included; the cache key and Vary '
  + 'read the fields as forwarded, so a removed header never splits the cache. A change reaches the edge with the next configuration version and '
  + 'applies to cached objects on their next hit (nothing is purged).';

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
  summary: 'Create a response headers policy', description: `${rules} Audit-logged. ${atTheEdge}`,
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
    + `the endpoint moves to \`deploying\`. ${rules} Both changes are audit-logged. ${atTheEdge}`,
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
    + `Applies to every endpoint and route that refers to it: those endpoints read \`deploying\` until the edge nodes have the change (a description alone changes nothing there). With a stale If-Match: 412, nothing changes. ${rules} Audit-logged. ${atTheEdge}`,
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
