// The checks the working configuration makes on endpoints and routes for the
// policies (document 3 §4.1, §4.3, §4.8, §4.9): a response_headers_policy_id
// must name an existing policy, token authentication needs an active signing
// key, and a default-deny endpoint needs a rule that lets someone in. Apart from the policy services, so that endpoints and routes can use
// them without depending on them.
import type { RequestContext } from '../core/request-context.ts';
import type { FieldError } from '../http/errors.ts';
import { IpRule, ResponseHeadersPolicy, SigningKey } from './policies.entities.ts';

/** [] when `id` is null or names an existing policy; otherwise the problem, for 422 INVALID_CONFIGURATION. */
export async function policyProblems(rc: RequestContext, id: string | null | undefined, field = 'response_headers_policy_id'): Promise<FieldError[]> {
  if (!id) return [];
  return (await rc.em.findOne(ResponseHeadersPolicy, id, { fields: ['id'] })) ? [] : [{ field, message: `Response headers policy ${id} does not exist` }];
}

/** Token authentication needs an active signing key of the endpoint (none exist before the endpoint does). */
export async function tokenAuthProblems(rc: RequestContext, endpointId: string | undefined, enabled: boolean): Promise<FieldError[]> {
  if (!enabled) return [];
  const keys = endpointId ? await rc.em.count(SigningKey, { endpoint: endpointId, status: 'active' }) : 0;
  return keys ? [] : [{ field: 'token_auth_enabled', message: 'The endpoint has no active signing key; create one first (viewers would all be refused)' }];
}

/** Actions that let a viewer in (a challenged viewer passes once it returns with the cookie). */
export const ADMITTING_ACTIONS = ['allow', 'challenge'] as const;

/** ip_default_action deny refuses everyone no rule admits: it needs an allow or challenge rule (none exist before the endpoint does). */
export async function defaultDenyProblems(rc: RequestContext, endpointId: string | undefined, action: string): Promise<FieldError[]> {
  if (action !== 'deny') return [];
  const admitting = endpointId ? await rc.em.count(IpRule, { endpoint: endpointId, action: { $in: [...ADMITTING_ACTIONS] } }) : 0;
  return admitting ? [] : [{ field: 'ip_default_action', message: 'The endpoint has no allow or challenge IP rule; add one first (deny would refuse every viewer)' }];
}
