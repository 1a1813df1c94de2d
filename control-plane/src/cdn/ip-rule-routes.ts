// IP access rules of an endpoint (document 3 §4.9): list (action filter) and
// create, with their distribution aliases; read, update (cidr fixed) and delete.
import { z } from 'zod';
import { bare, empty, page, reply } from '../http/route.ts';
import { pageQuery } from '../http/schemas.ts';
import { distributionAlias } from './endpoint-routes.ts';
import { endpointChildParams, endpointParams, listEndpointChildren } from './endpoint-scoped.ts';
import { createIpRuleBody, ipRuleRecord, ipRuleResource, MAX_IP_RULES, presentIpRule, updateIpRuleBody } from './ip-rule-record.ts';
import { createIpRule, deleteIpRule, findIpRule, updateIpRule } from './ip-rule-service.ts';
import { IP_ACTIONS, IpRule } from './policies.entities.ts';
import { defineCdnRoute as defineRoute } from './services.ts';
import { EDGE_REQUEST_ORDER } from './endpoint-record.ts';

const tags = ['CDN: IP access rules'];
const read = { permission: 'cdn.read' } as const;
const write = { permission: 'cdn.write' } as const;
const base = '/v1/cdn/endpoints/:id/ip-rules';
const params = endpointChildParams('rule_id');
const aliasNote = ' Also under `/v1/cdn/distributions/{id}/ip-rules`.';
const IP_RULE_SEMANTICS = 'At the edge, before the cache and the origin, the first rule in evaluation order (lowest priority value, then oldest) whose '
  + 'range holds the viewer\'s address decides: allow serves; block answers 403; challenge answers a 403 HTML page that sets a cookie '
  + '(__edge_challenge, bound to the endpoint, the address and an hour) and reloads itself after a second, so a browser comes back with the cookie and '
  + 'passes for that hour while clients that keep no cookies stay refused. When no rule holds the address, the endpoint\'s ip_default_action decides: '
  + 'allow (the default) serves, deny answers 403. IPv4 and IPv6 ranges alike; an IPv4-mapped IPv6 address is judged as its IPv4 address.';

export const listIpRulesRoute = defineRoute({
  method: 'get', path: base, tags, access: read,
  summary: 'List the IP access rules of an endpoint',
  description: `In evaluation order: lowest priority value first, then oldest. ${IP_RULE_SEMANTICS}${aliasNote}`,
  params: endpointParams, query: pageQuery({ action: z.enum(IP_ACTIONS).optional() }),
  responses: { 200: page(ipRuleRecord) },
  async handler({ params, query, rc }) {
    const found = await listEndpointChildren(rc, IpRule, params.id, query.action ? { action: query.action } : {}, query, { field: 'priority', direction: 'asc' });
    return { items: found.items.map(presentIpRule), meta: found.meta };
  },
});

export const createIpRuleRoute = defineRoute({
  method: 'post', path: base, tags, access: write, idempotent: true,
  summary: 'Create an IP access rule',
  description: 'action and cidr required; priority defaults to 100. The cidr is stored canonically (203.0.113.7 → 203.0.113.7/32, 2001:DB8:0::/32 → '
    + '2001:db8::/32, ::ffff:10.0.0.0/104 → 10.0.0.0/8). A range the edge cannot use is refused with 422 INVALID_CONFIGURATION naming cidr, by the '
    + 'function the edge compiles rules with: not an IPv4 or IPv6 address or range (octal and hex spellings included), a prefix too long, or host bits set '
    + `(10.0.0.5/8: the message names the network 10.0.0.0/8). A second rule for the same range, or more than ${MAX_IP_RULES} rules on one endpoint, is refused `
    + `with 409 CONFLICT. Audit-logged. ${IP_RULE_SEMANTICS} ${EDGE_REQUEST_ORDER}${aliasNote}`,
  params: endpointParams, body: createIpRuleBody,
  responses: { 201: bare(ipRuleResource) },
  errors: ['CONFLICT', 'INVALID_CONFIGURATION'],
  async handler({ params, body, rc }) {
    const rule = await createIpRule(rc, params.id, body);
    return reply.created(presentIpRule(rule), `/v1/cdn/endpoints/${params.id}/ip-rules/${rule.id}`);
  },
});

export const readIpRuleRoute = defineRoute({
  method: 'get', path: `${base}/:rule_id`, tags, access: read,
  summary: 'Read an IP access rule', description: 'With a strong ETag for If-Match.',
  params,
  responses: { 200: bare(ipRuleResource) },
  async handler({ params, rc }) {
    return presentIpRule(await findIpRule(rc, params.id, params.rule_id));
  },
});

export const updateIpRuleRoute = defineRoute({
  method: 'patch', path: `${base}/:rule_id`, tags, access: write,
  summary: 'Update an IP access rule',
  description: 'Partial: action, description (nullable) and priority; cidr cannot be changed (400 naming cidr). With a stale If-Match: 412. Making the last '
    + 'allow or challenge rule of an endpoint with ip_default_action deny a block rule is refused with 422 INVALID_CONFIGURATION (it would refuse every '
    + `viewer). Audit-logged. ${IP_RULE_SEMANTICS}`,
  params, body: updateIpRuleBody,
  ifMatch: ({ params, rc }) => findIpRule(rc, params.id, params.rule_id),
  responses: { 200: bare(ipRuleResource) },
  errors: ['INVALID_CONFIGURATION'],
  async handler({ params, body, rc }) {
    return presentIpRule(await updateIpRule(rc, params.id, params.rule_id, body));
  },
});

export const deleteIpRuleRoute = defineRoute({
  method: 'delete', path: `${base}/:rule_id`, tags, access: write,
  summary: 'Delete an IP access rule',
  description: 'Takes effect at the edge with the next configuration version. The last allow or challenge rule of an endpoint with ip_default_action deny '
    + 'is refused with 409 RESOURCE_IN_USE. Audit-logged.',
  params,
  responses: { 204: empty },
  errors: ['RESOURCE_IN_USE'],
  async handler({ params, rc }) {
    await deleteIpRule(rc, params.id, params.rule_id);
    return reply.noContent();
  },
});

export const ipRuleRoutes = [
  listIpRulesRoute, createIpRuleRoute, readIpRuleRoute, updateIpRuleRoute, deleteIpRuleRoute,
  distributionAlias(listIpRulesRoute), distributionAlias(createIpRuleRoute),
];
