// Edge agent tokens (DESIGN.md §5, §7): list, create, read, revoke (DELETE)
// and rotate under /v1/cdn/agent-tokens. Single records are bare, lists
// `{data, meta}`. Superadmins only (cdn.agent_tokens.manage is held through
// the superadmin wildcard alone): a token lets a machine join the edge fleet
// and receive every secret in the configuration.
import { z } from 'zod';
import { paginate } from '../http/paging.ts';
import { bare, empty, page, reply } from '../http/route.ts';
import { pageQuery, sortParam, uuid } from '../http/schemas.ts';
import { AGENT_TOKEN_STATUSES, AgentToken } from './agent-token.entity.ts';
import { agentTokenRecord, agentTokenResource, createAgentTokenBody, issuedAgentTokenResource } from './agent-token-record.ts';
import { createAgentToken, findAgentToken, revokeAgentToken, rotateAgentToken } from './agent-token-service.ts';
import { defineEdgeRoute as defineRoute } from './services.ts';

const tags = ['CDN: agent tokens'];
const manage = { permission: 'cdn.agent_tokens.manage' } as const;
const tokenParams = z.strictObject({ token_id: uuid() });
const usage = 'Give the value to an edge agent as AGENT_TOKEN; it sends it as `authorization: Bearer agt_...` when it opens its control stream.';

export const listAgentTokensRoute = defineRoute({
  method: 'get', path: '/v1/cdn/agent-tokens', tags, access: manage,
  summary: 'List agent tokens',
  description: 'Newest first by default. Values are never returned (only create and rotate show one, once). Superadmins only.',
  query: pageQuery({
    status: z.enum(AGENT_TOKEN_STATUSES).optional(),
    sort: sortParam(['created_at', 'name'], '-created_at'),
  }),
  responses: { 200: page(agentTokenRecord) },
  async handler({ query, rc }) {
    const where = query.status ? { status: query.status } : {};
    return paginate(rc.em, AgentToken, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
  },
});

export const createAgentTokenRoute = defineRoute({
  method: 'post', path: '/v1/cdn/agent-tokens', tags, access: manage,
  summary: 'Create an agent token',
  description: `Answers the record plus \`token\`, the value, this once (only its hash is stored). ${usage} `
    + 'No Idempotency-Key: a replay would have to keep the value. Audit-logged without the value. Superadmins only.',
  body: createAgentTokenBody,
  responses: { 201: bare(issuedAgentTokenResource) },
  async handler({ body, rc, app }) {
    const token = await createAgentToken(app, rc, body);
    return reply.created(token, `/v1/cdn/agent-tokens/${token.id}`);
  },
});

export const readAgentTokenRoute = defineRoute({
  method: 'get', path: '/v1/cdn/agent-tokens/:token_id', tags, access: manage,
  summary: 'Read an agent token', description: 'Without its value. Superadmins only.',
  params: tokenParams,
  responses: { 200: bare(agentTokenResource) },
  async handler({ params, rc }) {
    return findAgentToken(rc.em, params.token_id);
  },
});

export const revokeAgentTokenRoute = defineRoute({
  method: 'delete', path: '/v1/cdn/agent-tokens/:token_id', tags, access: manage,
  summary: 'Revoke an agent token',
  description: 'Irreversible and immediate: the control streams open with the token are closed on every control-plane replica, and no new one is accepted. '
    + 'The record stays (status revoked) for the audit trail. A token already revoked is a 409. Audit-logged. Superadmins only.',
  params: tokenParams,
  responses: { 204: empty },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    await revokeAgentToken(app, rc, params.token_id);
    return reply.noContent();
  },
});

export const rotateAgentTokenRoute = defineRoute({
  method: 'post', path: '/v1/cdn/agent-tokens/:token_id/rotate', tags, access: manage,
  summary: 'Rotate an agent token',
  description: 'Atomic: the token is revoked (its streams closed) and a new one (new id) issued with the same name, description and expiry, without a grace period: '
    + 'give the agent the new value. Answers the new record plus its value, once; the old record names it in `replaced_by`. '
    + 'A revoked or expired token cannot be rotated (409). Audit-logged without values. Superadmins only.',
  params: tokenParams,
  responses: { 200: bare(issuedAgentTokenResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    return rotateAgentToken(app, rc, params.token_id);
  },
});

export const agentTokenRoutes = [listAgentTokensRoute, createAgentTokenRoute, readAgentTokenRoute, revokeAgentTokenRoute, rotateAgentTokenRoute];
