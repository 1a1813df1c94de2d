// The API token record of document 3 §2 and its request body. The value is
// never part of the record: create and rotate answer it once, in `token`,
// through issuedApiTokenRecord; reads and lists cannot show it.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { dateTime, lineText, orNull, timestamp, timestampOrNull, withExample } from '../http/schemas.ts';
import { API_TOKEN_ROLES, API_TOKEN_STATUSES } from './api-token.entity.ts';

export const apiTokenRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  role: z.enum(API_TOKEN_ROLES),
  status: z.enum(API_TOKEN_STATUSES),
  last_used_at: timestampOrNull().describe('Updated at most once a minute'),
  expires_at: timestampOrNull().describe('null: never expires. Past it the token is refused (401) though its status stays active.'),
  created_at: timestamp(),
  updated_at: timestamp(),
  created_by: orNull(z.uuid()).describe('The user who created the token (for a token created with an API token: that token\'s creator)'),
  replaced_by: orNull(z.uuid()).describe('On a rotated (revoked) token: the token that replaced it'),
});

export const apiTokenResource = versioned(apiTokenRecord);

export const issuedApiTokenRecord = apiTokenRecord.extend({
  token: z.string().describe('The token\'s value (`cdn_` + 43 characters), shown this once: store it now. Send it as `Authorization: Bearer cdn_...`.'),
});

export const issuedApiTokenResource = versioned(issuedApiTokenRecord);

export const createApiTokenBody = withExample(z.strictObject({
  name: lineText(100),
  role: z.enum(API_TOKEN_ROLES).describe('viewer reads; operator also purges, prefetches and tests log drains; admin does every CDN write'),
  expires_at: dateTime().nullable().default(null).transform((v) => (v === null ? null : new Date(v)))
    .describe('Omit (or null) for a token that never expires. Must be in the future.'),
}), { name: 'Deploy pipeline purges', role: 'operator' });
