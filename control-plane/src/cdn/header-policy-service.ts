// Response header policies, document 3 §4.7. A policy stands alone (top
// level); endpoints and routes refer to it by response_headers_policy_id, a
// reference the working configuration checks (policyProblems) and that keeps
// the policy from being deleted (409). Nested members merge on update; what
// the edge could not honour on the merged policy is refused with 422, by the
// rules the edge itself runs (shared/src/config/response-policies.ts).
import { headerPolicyProblems } from '../../../shared/src/config/response-policies.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { found } from '../http/errors.ts';
import { CdnRoute, Endpoint } from './cdn.entities.ts';
import { markDeploying, updateEndpoint } from './endpoint-service.ts';
import { assertValidConfiguration, merged, resourceInUse } from './fields.ts';
import { DEFAULT_CORS, DEFAULT_SECURITY_HEADERS, type HeaderPolicyInput } from './header-policy-record.ts';
import { ResponseHeadersPolicy, type SecurityHeaders } from './policies.entities.ts';
import { headerPolicyFields, publishedColumns } from './snapshot-fields.ts';

const POLICY_FIELDS = [
  'name', 'description', 'cors', 'security_headers', 'custom_response_headers', 'custom_request_headers', 'remove_response_headers', 'remove_request_headers',
] as const satisfies readonly (keyof ResponseHeadersPolicy)[];
const snapshot = (p: ResponseHeadersPolicy) => Object.fromEntries(POLICY_FIELDS.map((f) => [f, p[f]])) as Partial<ResponseHeadersPolicy>;

export async function findHeaderPolicy(rc: RequestContext, id: string): Promise<ResponseHeadersPolicy> {
  return found(await rc.em.findOne(ResponseHeadersPolicy, id), 'Response headers policy');
}

type PolicyValues = Pick<ResponseHeadersPolicy, (typeof POLICY_FIELDS)[number]>;

/** The stored values after `input` (nested members merged over `current`, or over the defaults on create). */
function valuesOf(input: HeaderPolicyInput, current: PolicyValues): PolicyValues {
  const security = { ...current.security_headers } as Record<string, unknown>;
  for (const [name, patch] of Object.entries(input.security_headers ?? {})) {
    security[name] = merged(security[name] as object, patch as object);
  }
  const next = { ...current };
  for (const [field, value] of Object.entries(input)) if (value !== undefined) (next as Record<string, unknown>)[field] = value;
  next.cors = merged(current.cors, input.cors);
  next.security_headers = security as unknown as SecurityHeaders;
  return next;
}

const DEFAULTS: PolicyValues = {
  name: '', description: '', cors: DEFAULT_CORS, security_headers: DEFAULT_SECURITY_HEADERS, custom_response_headers: [], custom_request_headers: [],
  remove_response_headers: [], remove_request_headers: [],
};

export async function createHeaderPolicy(rc: RequestContext, input: HeaderPolicyInput): Promise<ResponseHeadersPolicy> {
  const values = valuesOf(input, DEFAULTS);
  assertValidConfiguration(headerPolicyProblems(values));
  const policy = rc.em.create(ResponseHeadersPolicy, values as never);
  recordAudit(rc, { action: 'response_headers_policy.created', resource_type: 'response_headers_policy', resource_id: policy.id, changes: changesOf({}, snapshot(policy)) });
  await rc.em.flush();
  return policy;
}

/** Creates a policy and makes it the endpoint's own (document 3 §4.7 "create for a distribution"), in one transaction. */
export async function createDistributionHeaderPolicy(rc: RequestContext, endpointId: string, input: HeaderPolicyInput): Promise<ResponseHeadersPolicy> {
  return inTransaction(rc, async (tx) => {
    const policy = await createHeaderPolicy(tx, input);
    await updateEndpoint(tx, endpointId, { response_headers_policy_id: policy.id });
    return policy;
  });
}

export async function updateHeaderPolicy(rc: RequestContext, id: string, input: HeaderPolicyInput): Promise<ResponseHeadersPolicy> {
  const policy = await findHeaderPolicy(rc, id);
  const before = snapshot(policy);
  const values = valuesOf(input, policy);
  const changes = changesOf(before, values as Partial<ResponseHeadersPolicy>, POLICY_FIELDS);
  if (Object.keys(changes).length === 0) return policy;
  assertValidConfiguration(headerPolicyProblems(values));
  Object.assign(policy, values);
  recordAudit(rc, { action: 'response_headers_policy.updated', resource_type: 'response_headers_policy', resource_id: policy.id, changes });
  // The endpoints using it serve something else once the edge has the change (a description publishes nothing).
  if (Object.keys(changes).some((field) => POLICY_EDGE_COLUMNS.has(field))) for (const endpoint of await users(rc, id)) markDeploying(endpoint);
  await rc.em.flush();
  return policy;
}

const POLICY_EDGE_COLUMNS = publishedColumns(headerPolicyFields);

/** The endpoints that use the policy, themselves or through a route. */
async function users(rc: RequestContext, id: string): Promise<Endpoint[]> {
  const routes = await rc.em.find(CdnRoute, { response_headers_policy_id: id }, { fields: ['distribution'] });
  const viaRoutes = routes.map((r) => (r.distribution as unknown as { id: string }).id);
  return rc.em.find(Endpoint, { $or: [{ response_headers_policy_id: id }, { id: { $in: viaRoutes } }] });
}

/** Endpoints and routes that refer to the policy. */
async function referrers(rc: RequestContext, id: string) {
  const [endpoints, routes] = await Promise.all([
    rc.em.find(Endpoint, { response_headers_policy_id: id }, { fields: ['id'] }),
    rc.em.find(CdnRoute, { response_headers_policy_id: id }, { fields: ['id'] }),
  ]);
  return { endpoints, routes };
}

/** Ids of the policies a distribution uses (its own and its routes'), for the distribution-scoped list. */
export async function distributionPolicyIds(rc: RequestContext, endpointId: string): Promise<string[]> {
  const endpoint = await rc.em.findOneOrFail(Endpoint, endpointId);
  const routes = await rc.em.find(CdnRoute, { distribution: endpointId, response_headers_policy_id: { $ne: null } }, { fields: ['response_headers_policy_id'] });
  return [...new Set([endpoint.response_headers_policy_id, ...routes.map((r) => r.response_headers_policy_id)].filter((id): id is string => id !== null))];
}

/** Refused (409 RESOURCE_IN_USE) while an endpoint or a route refers to it. */
export async function deleteHeaderPolicy(rc: RequestContext, id: string): Promise<void> {
  const policy = await findHeaderPolicy(rc, id);
  const { endpoints, routes } = await referrers(rc, id);
  if (endpoints.length || routes.length) {
    const uses = [
      ...(endpoints.length ? [`endpoint(s) ${endpoints.map((e) => e.id).join(', ')}`] : []),
      ...(routes.length ? [`route(s) ${routes.map((r) => r.id).join(', ')}`] : []),
    ];
    throw resourceInUse(`The policy is used by ${uses.join(' and ')}; point them at another policy (or null) first`);
  }
  recordAudit(rc, { action: 'response_headers_policy.deleted', resource_type: 'response_headers_policy', resource_id: policy.id, changes: changesOf(snapshot(policy), {}, POLICY_FIELDS) });
  rc.em.remove(policy);
  await rc.em.flush();
}
