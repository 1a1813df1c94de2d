// The checks the working configuration makes on endpoints and routes for the
// policies (document 3 §4.1, §4.3, §4.8): a response_headers_policy_id must
// name an existing policy, and token authentication needs an active signing
// key. Apart from the policy services, so that endpoints and routes can use
// them without depending on them.
import type { RequestContext } from '../core/request-context.ts';
import type { FieldError } from '../http/errors.ts';
import { ResponseHeadersPolicy, SigningKey } from './policies.entities.ts';

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
