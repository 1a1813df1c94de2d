// API tokens (document 3 §4.11; DESIGN.md §4, §6): list, create, read, revoke
// (DELETE) and rotate under /v1/cdn/api-tokens, as every issued token
// (tokens/issued-token-routes.ts). Administrators only (cdn.api_tokens.manage).
import { issuedTokenRoutes } from '../tokens/issued-token-routes.ts';
import type { AuthServices } from '../auth/index.ts';
import { API_TOKEN_STATUSES, ApiToken } from './api-token.entity.ts';
import { apiTokenRecord, apiTokenResource, createApiTokenBody, issuedApiTokenResource } from './api-token-record.ts';
import { createApiToken, findApiToken, revokeApiToken, rotateApiToken } from './api-token-service.ts';

const usage = 'Send the value as `Authorization: Bearer cdn_...` on CDN routes; the token acts with its role\'s permissions on the CDN interface only.';

export const apiTokenRoutes = issuedTokenRoutes<AuthServices, ApiToken, typeof createApiTokenBody, typeof apiTokenRecord, typeof apiTokenResource, typeof issuedApiTokenResource>({
  path: '/v1/cdn/api-tokens', tags: ['CDN: API tokens'], permission: 'cdn.api_tokens.manage', noun: 'API token',
  entity: ApiToken, statuses: API_TOKEN_STATUSES,
  records: { list: apiTokenRecord, single: apiTokenResource, issued: issuedApiTokenResource },
  createBody: createApiTokenBody, idempotentCreate: true,
  describe: {
    create: `An idempotent replay with the same Idempotency-Key repeats this reply, so a retried create makes no second token. ${usage} Audit-logged without the value.`,
    revoke: 'Irreversible and immediate: the next request with the token is refused (401).',
    rotate: 'Atomic: the token is revoked and a new one (new id) issued with the same name, role and expiry; the old value stops working at once, without a grace period.',
  },
  service: {
    create: createApiToken, find: findApiToken, rotate: rotateApiToken,
    revoke: (_app, rc, id) => revokeApiToken(rc, id),
  },
});
