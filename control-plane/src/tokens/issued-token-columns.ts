// The columns every issued token's table shares (cdn_api_token,
// cdn_agent_token): the state the life cycle of issued-tokens.ts moves
// (status, revoked_at, replaced_by), its use and expiry, who issued it, and
// the optimistic-lock version behind ETags and If-Match.
import { p } from '@mikro-orm/core';

export const ISSUED_TOKEN_STATUSES = ['active', 'revoked'] as const;

export const issuedTokenColumns = () => ({
  status: p.enum(ISSUED_TOKEN_STATUSES).default('active'),
  last_used_at: p.datetime().nullable(),
  expires_at: p.datetime().nullable(),
  revoked_at: p.datetime().nullable(),
  // Who issued it (a user id; null when the platform did, e.g. a CLI); no foreign key: the record outlives accounts.
  created_by: p.uuid().nullable(),
  // Set on a rotated token: the token that replaced it.
  replaced_by: p.uuid().nullable(),
  created_at: p.datetime().onCreate(() => new Date()),
  updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  version: p.integer().version(),
});
