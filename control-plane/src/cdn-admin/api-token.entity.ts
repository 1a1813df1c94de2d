import { defineEntity, p } from '@mikro-orm/core';

/** The roles a machine API token may carry (document 3 §2): never superadmin. */
export const API_TOKEN_ROLES = ['viewer', 'operator', 'admin'] as const;
export type ApiTokenRole = (typeof API_TOKEN_ROLES)[number];
export const API_TOKEN_STATUSES = ['active', 'revoked'] as const;

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
    status: p.enum(API_TOKEN_STATUSES).default('active'),
    // HMAC-SHA256 (hex) of the value under the token pepper: looked up by the guard, never shown.
    token_hash: p.string().length(64).unique('cdn_api_token_hash_key').hidden(),
    last_used_at: p.datetime().nullable(),
    expires_at: p.datetime().nullable(),
    revoked_at: p.datetime().nullable(),
    // The person answerable for the token (a user id; no foreign key: the record outlives accounts).
    created_by: p.uuid().nullable(),
    // Set on a rotated token: the token that replaced it.
    replaced_by: p.uuid().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'cdn_api_token_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'cdn_api_token_status_idx', properties: ['status'] },
  ],
});
export class ApiToken extends ApiTokenSchema.class {}
ApiTokenSchema.setClass(ApiToken);
