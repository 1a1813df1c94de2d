// The reference check the working configuration makes for endpoints and
// routes (document 3 §4.1, §4.3): a response_headers_policy_id must name an
// existing policy. Apart from the policy service, so that endpoints and routes
// can use it without depending on it.
import type { RequestContext } from '../core/request-context.ts';
import type { FieldError } from '../http/errors.ts';
import { ResponseHeadersPolicy } from './policies.entities.ts';

/** [] when `id` is null or names an existing policy; otherwise the problem, for 422 INVALID_CONFIGURATION. */
export async function policyProblems(rc: RequestContext, id: string | null | undefined, field = 'response_headers_policy_id'): Promise<FieldError[]> {
  if (!id) return [];
  return (await rc.em.findOne(ResponseHeadersPolicy, id, { fields: ['id'] })) ? [] : [{ field, message: `Response headers policy ${id} does not exist` }];
}
