import { defineEntity, p } from '@mikro-orm/core';
import { ISSUED_TOKEN_STATUSES, issuedTokenColumns } from '../tokens/issued-token-columns.ts';

export const AGENT_TOKEN_STATUSES = ISSUED_TOKEN_STATUSES;

// An edge agent token (DESIGN.md §7): what an edge agent presents on its
// control stream (`authorization: Bearer agt_...`). Issued by a superadmin;
// the value (`agt_` + 256 random bits) is shown once and only its keyed hash
// is stored. Property names follow the API record, so the record maps 1:1.
export const AgentTokenSchema = defineEntity({
  name: 'AgentToken',
  tableName: 'cdn_agent_token',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    description: p.string().length(500).nullable(),
    // HMAC-SHA256 (hex) of the value under the token pepper: looked up by the verifier, never shown.
    token_hash: p.string().length(64).unique('cdn_agent_token_hash_key').hidden(),
    // `agt_` and the first 4 characters of the secret part (redactToken): tells tokens apart, reveals nothing usable.
    token_hint: p.string().length(16),
    // Set once the expiry sweep has told every replica to close the expired token's streams.
    expiry_announced_at: p.datetime().nullable().hidden(),
    ...issuedTokenColumns(),
  },
  indexes: [
    { name: 'cdn_agent_token_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'cdn_agent_token_status_idx', properties: ['status'] },
    {
      name: 'cdn_agent_token_expiry_idx',
      expression: `create index cdn_agent_token_expiry_idx on cdn_agent_token (expires_at) where status = 'active' and expiry_announced_at is null`,
    },
  ],
});
export class AgentToken extends AgentTokenSchema.class {}
AgentTokenSchema.setClass(AgentToken);
