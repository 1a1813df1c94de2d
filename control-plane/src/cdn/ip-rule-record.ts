// The IP access rule record of document 3 §2 and its request bodies; the
// values are the edge snapshot's (shared/src/config/snapshot.ts ipRuleSnapshot).
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { orNull, timestamp, withExample } from '../http/schemas.ts';
import { ipRuleSnapshot } from '../../../shared/src/config/snapshot.ts';
import { declared } from './fields.ts';
import { IP_ACTIONS, type IpRule } from './policies.entities.ts';

const edge = ipRuleSnapshot.shape;

export const MAX_IP_RULES = 1000;

export const ipRuleRecord = z.object({
  id: z.uuid(),
  endpoint_id: z.uuid(),
  action: z.enum(IP_ACTIONS),
  cidr: z.string().describe('Canonical form: address/bits (IPv4 four-part decimal, IPv6 compact)'),
  description: orNull(z.string()),
  priority: z.number().int(),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const ipRuleResource = versioned(ipRuleRecord);
export const presentIpRule = (r: IpRule) => ({ ...r, endpoint_id: r.endpoint.id });

const ipRuleFields = {
  action: edge.action,
  description: z.string().trim().max(255).regex(/^[^\u0000\r\n]*$/, 'Must be a single line').nullable(),
  priority: declared(edge.priority).describe('Lower values are evaluated first'),
};

export const createIpRuleBody = withExample(z.strictObject({
  ...ipRuleFields,
  cidr: z.string().max(64).describe('An IPv4 or IPv6 address or range (a bare address is /32 or /128); host bits must be clear'),
  description: ipRuleFields.description.default(null),
  priority: edge.priority.describe('Lower values are evaluated first'),
}), { action: 'block', cidr: '203.0.113.0/24', description: 'Scraper network seen in the access logs', priority: 10 });
export type CreateIpRuleInput = z.output<typeof createIpRuleBody>;

export const updateIpRuleBody = z.strictObject(ipRuleFields).partial().extend({
  cidr: z.any().optional().refine((v) => v === undefined, 'cidr cannot be changed; delete the rule and create another'),
});
export type UpdateIpRuleInput = z.output<typeof updateIpRuleBody>;
