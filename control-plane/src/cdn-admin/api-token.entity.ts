import { defineEntity, p } from '@mikro-orm/core';
import { ISSUED_TOKEN_STATUSES, issuedTokenColumns } from '../tokens/issued-token-columns.ts';

/** The roles a machine API token may carry (document 3 §2): never superadmin. */
export const API_TOKEN_ROLES = ['viewer', 'operator', 'admin'] as const;
export type ApiTokenRole = (typeof API_TOKEN_ROLES)[number];
export const API_TOKEN_STATUSES = ISSUED_TOKEN_STATUSES;

// A CDN API token (document 3 §2, API token). The value (`cdn_` + 256 random
// bits) is shown once; only its keyed hash is stored. Property names follow
// the API record, so the record maps 1:1.
export const ApiTokenSchema = defineEntity({
  name: 'ApiToken',
  tableName: 'cdn_api_token',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    role: p.enum(API_TOKEN_ROLES),
    // HMAC-SHA256 (hex) of the value under the token pepper: looked up by the guard, never shown.
    token_hash: p.string().length(64).unique('cdn_api_token_hash_key').hidden(),
    ...issuedTokenColumns(),
  },
  indexes: [
    { name: 'cdn_api_token_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'cdn_api_token_status_idx', properties: ['status'] },
  ],
});
export class ApiToken extends ApiTokenSchema.class {}
ApiTokenSchema.setClass(ApiToken);
