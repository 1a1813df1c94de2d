// Edge agent tokens (DESIGN.md §5, §7): list, create, read, revoke (DELETE)
// and rotate under /v1/cdn/agent-tokens, as every issued token
// (tokens/issued-token-routes.ts). Superadmins only (cdn.agent_tokens.manage is
// held through the superadmin wildcard alone): a token lets a machine join the
// edge fleet and receive every secret in the configuration.
import { issuedTokenRoutes } from '../tokens/issued-token-routes.ts';
import { AGENT_TOKEN_STATUSES, AgentToken } from './agent-token.entity.ts';
import { agentTokenRecord, agentTokenResource, createAgentTokenBody, issuedAgentTokenResource } from './agent-token-record.ts';
import { createAgentToken, findAgentToken, revokeAgentToken, rotateAgentToken } from './agent-token-service.ts';
import type { EdgeChannelServices } from './services.ts';

const usage = 'Give the value to an edge agent as AGENT_TOKEN; it sends it as `authorization: Bearer agt_...` when it opens its control stream.';

export const agentTokenRoutes = issuedTokenRoutes<EdgeChannelServices, AgentToken, typeof createAgentTokenBody, typeof agentTokenRecord, typeof agentTokenResource, typeof issuedAgentTokenResource>({
  path: '/v1/cdn/agent-tokens', tags: ['CDN: agent tokens'], permission: 'cdn.agent_tokens.manage', noun: 'agent token',
  entity: AgentToken, statuses: AGENT_TOKEN_STATUSES,
  records: { list: agentTokenRecord, single: agentTokenResource, issued: issuedAgentTokenResource },
  createBody: createAgentTokenBody, idempotentCreate: false,
  describe: {
    create: `${usage} No Idempotency-Key: a replay would have to keep the value. Audit-logged without the value.`,
    revoke: 'Irreversible and immediate: the control streams open with the token are closed on every control-plane replica, and no new one is accepted.',
    rotate: 'Atomic: the token is revoked (its streams closed) and a new one (new id) issued with the same name, description and expiry, without a grace period: '
      + 'give the agent the new value.',
    every: 'Superadmins only.',
  },
  service: { create: createAgentToken, find: findAgentToken, revoke: revokeAgentToken, rotate: rotateAgentToken },
});
