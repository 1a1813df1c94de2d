// IP access rules of an endpoint, document 3 §4.9. The cidr is stored in its
// canonical form (shared/src/match/cidr.ts canonicalCidr: the edge compiles
// the same text with the same function, so what it could not use is refused
// here with 422) and never changes; one rule per range and endpoint (409
// CONFLICT for a second), at most MAX_IP_RULES per endpoint (409 CONFLICT).
// While the endpoint denies by default, its last rule that admits viewers
// (allow, challenge) stays: deleting it is 409, making it a block rule 422.
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, conflict } from '../http/errors.ts';
import { canonicalCidr } from '../../../shared/src/match/cidr.ts';
import { findEndpoint } from './endpoint-service.ts';
import { findEndpointChild } from './endpoint-scoped.ts';
import { assertValidConfiguration, invalidConfiguration, resourceInUse } from './fields.ts';
import { MAX_IP_RULES, type CreateIpRuleInput, type UpdateIpRuleInput } from './ip-rule-record.ts';
import { IpRule } from './policies.entities.ts';
import { ADMITTING_ACTIONS } from './policy-checks.ts';

const IP_RULE_FIELDS = ['action', 'cidr', 'description', 'priority'] as const satisfies readonly (keyof IpRule)[];
const snapshot = (r: IpRule) => ({ ...Object.fromEntries(IP_RULE_FIELDS.map((f) => [f, r[f]])), endpoint_id: r.endpoint.id }) as Record<string, unknown>;

export const findIpRule = (rc: RequestContext, endpointId: string, id: string) => findEndpointChild(rc, IpRule, endpointId, id, 'IP access rule');

export async function createIpRule(rc: RequestContext, endpointId: string, input: CreateIpRuleInput): Promise<IpRule> {
  const endpoint = await findEndpoint(rc, endpointId);
  const parsed = canonicalCidr(input.cidr);
  if ('problem' in parsed) throw invalidConfiguration([{ field: 'cidr', message: parsed.problem }]);
  if (await rc.em.findOne(IpRule, { endpoint: endpoint.id, cidr: parsed.cidr }, { fields: ['id'] })) {
    throw conflict(`The endpoint already has a rule for ${parsed.cidr}; update that rule instead`);
  }
  if ((await rc.em.count(IpRule, { endpoint: endpoint.id })) >= MAX_IP_RULES) {
    throw new ApiError('CONFLICT', `The endpoint already has the most IP access rules allowed (${MAX_IP_RULES}); use wider ranges or remove rules`);
  }
  const rule = rc.em.create(IpRule, { ...input, cidr: parsed.cidr, endpoint } as never);
  recordAudit(rc, { action: 'ip_rule.created', resource_type: 'ip_rule', resource_id: rule.id, changes: changesOf({}, snapshot(rule)) });
  await rc.em.flush();
  return rule;
}

export async function updateIpRule(rc: RequestContext, endpointId: string, id: string, input: UpdateIpRuleInput): Promise<IpRule> {
  const rule = await findIpRule(rc, endpointId, id);
  const before = snapshot(rule);
  const { cidr: _cidr, ...values } = input;
  if (values.action === 'block' && await isLastAdmittingRule(rc, endpointId, rule)) {
    assertValidConfiguration([{ field: 'action', message: 'The endpoint denies by default (ip_default_action deny) and this is its last allow or challenge rule; it would refuse every viewer' }]);
  }
  for (const [field, value] of Object.entries(values)) if (value !== undefined) (rule as unknown as Record<string, unknown>)[field] = value;
  const changes = changesOf(before, snapshot(rule));
  if (Object.keys(changes).length === 0) return rule;
  recordAudit(rc, { action: 'ip_rule.updated', resource_type: 'ip_rule', resource_id: rule.id, changes });
  await rc.em.flush();
  return rule;
}

/** Whether the rule is the last one admitting viewers (allow, challenge) of an endpoint that denies by default. */
async function isLastAdmittingRule(rc: RequestContext, endpointId: string, rule: IpRule): Promise<boolean> {
  if (!(ADMITTING_ACTIONS as readonly string[]).includes(rule.action)) return false;
  const endpoint = await findEndpoint(rc, endpointId);
  if (endpoint.ip_default_action !== 'deny') return false;
  return (await rc.em.count(IpRule, { endpoint: endpointId, action: { $in: [...ADMITTING_ACTIONS] }, id: { $ne: rule.id } })) === 0;
}

export async function deleteIpRule(rc: RequestContext, endpointId: string, id: string): Promise<void> {
  const rule = await findIpRule(rc, endpointId, id);
  if (await isLastAdmittingRule(rc, endpointId, rule)) {
    throw resourceInUse('The endpoint denies by default (ip_default_action deny) and this is its last allow or challenge rule; set ip_default_action to allow or add another rule first');
  }
  recordAudit(rc, { action: 'ip_rule.deleted', resource_type: 'ip_rule', resource_id: rule.id, changes: changesOf(snapshot(rule), {}) });
  rc.em.remove(rule);
  await rc.em.flush();
}
