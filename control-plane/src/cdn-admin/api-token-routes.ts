// API tokens (document 3 §4.11; DESIGN.md §4, §6): list, create, read, revoke
// (DELETE) and rotate under /v1/cdn/api-tokens. Single records are bare,
// lists `{data, meta}`. Administrators only (cdn.api_tokens.manage).
import { z } from 'zod';
import { paginate } from '../http/paging.ts';
import { bare, empty, page, reply } from '../http/route.ts';
import { pageQuery, sortParam, uuid } from '../http/schemas.ts';
import { defineAuthRoute as defineRoute } from '../auth/index.ts';
import { API_TOKEN_STATUSES, ApiToken } from './api-token.entity.ts';
import { apiTokenRecord, apiTokenResource, createApiTokenBody, issuedApiTokenResource } from './api-token-record.ts';
import { createApiToken, findApiToken, revokeApiToken, rotateApiToken } from './api-token-service.ts';

const tags = ['CDN: API tokens'];
const manage = { permission: 'cdn.api_tokens.manage' } as const;
const tokenParams = z.strictObject({ token_id: uuid() });
const usage = 'Send the value as `Authorization: Bearer cdn_...` on CDN routes; the token acts with its role\'s permissions on the CDN interface only.';

export const listApiTokensRoute = defineRoute({
  method: 'get', path: '/v1/cdn/api-tokens', tags, access: manage,
  summary: 'List API tokens',
  description: 'Newest first by default. Values are never returned (only create and rotate show one, once).',
  query: pageQuery({
    status: z.enum(API_TOKEN_STATUSES).optional(),
    sort: sortParam(['created_at', 'name'], '-created_at'),
  }),
  responses: { 200: page(apiTokenRecord) },
  async handler({ query, rc }) {
    const where = query.status ? { status: query.status } : {};
    return paginate(rc.em, ApiToken, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
  },
});

export const createApiTokenRoute = defineRoute({
  method: 'post', path: '/v1/cdn/api-tokens', tags, access: manage, idempotent: true,
  summary: 'Create an API token',
  description: `Answers the record plus \`token\`, the value, this once (only its hash is stored; an idempotent replay with the same `
    + `Idempotency-Key repeats this reply, so a retried create makes no second token). ${usage} Audit-logged without the value.`,
  body: createApiTokenBody,
  responses: { 201: bare(issuedApiTokenResource) },
  async handler({ body, rc, app }) {
    const token = await createApiToken(app, rc, body);
    return reply.created(token, `/v1/cdn/api-tokens/${token.id}`);
  },
});

export const readApiTokenRoute = defineRoute({
  method: 'get', path: '/v1/cdn/api-tokens/:token_id', tags, access: manage,
  summary: 'Read an API token', description: 'Without its value.',
  params: tokenParams,
  responses: { 200: bare(apiTokenResource) },
  async handler({ params, rc }) {
    return findApiToken(rc.em, params.token_id);
  },
});

export const revokeApiTokenRoute = defineRoute({
  method: 'delete', path: '/v1/cdn/api-tokens/:token_id', tags, access: manage,
  summary: 'Revoke an API token',
  description: 'Irreversible and immediate: the next request with the token is refused (401). The record stays (status revoked) for the audit trail. '
    + 'A token already revoked is a 409. Audit-logged.',
  params: tokenParams,
  responses: { 204: empty },
  errors: ['CONFLICT'],
  async handler({ params, rc }) {
    await revokeApiToken(rc, params.token_id);
    return reply.noContent();
  },
});

export const rotateApiTokenRoute = defineRoute({
  method: 'post', path: '/v1/cdn/api-tokens/:token_id/rotate', tags, access: manage,
  summary: 'Rotate an API token',
  description: 'Atomic: the token is revoked and a new one (new id) issued with the same name, role and expiry; the old value stops working at once, '
    + 'without a grace period. Answers the new record plus its value, once; the old record names it in `replaced_by`. '
    + 'A revoked or expired token cannot be rotated (409). Audit-logged without values.',
  params: tokenParams,
  responses: { 200: bare(issuedApiTokenResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    return rotateApiToken(app, rc, params.token_id);
  },
});

export const apiTokenRoutes = [listApiTokensRoute, createApiTokenRoute, readApiTokenRoute, revokeApiTokenRoute, rotateApiTokenRoute];
