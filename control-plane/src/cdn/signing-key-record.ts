// The Signing key record of document 3 §2 and its request bodies. The secret
// is shown once, in the reply to create and rotate (signingKeyWithSecret);
// every other reply, list and audit entry carries no trace of it.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { timestamp, timestampOrNull } from '../http/schemas.ts';
import { SIGNING_ALGORITHMS, SIGNING_KEY_STATUSES, type SigningKey } from './policies.entities.ts';
import { nameField } from './fields.ts';

export const MAX_GRACE_HOURS = 168;
export const GENERATED_SECRET_LENGTH = 64;

export const signingKeyRecord = z.object({
  id: z.uuid(),
  endpoint_id: z.uuid(),
  name: z.string(),
  algorithm: z.enum(SIGNING_ALGORITHMS),
  status: z.enum(SIGNING_KEY_STATUSES),
  token_param: z.string(),
  expires_param: z.string(),
  ip_binding_enabled: z.boolean(),
  rotated_at: timestampOrNull().describe('When the secret was last rotated'),
  grace_period_ends_at: timestampOrNull().describe('Until when a secret replaced by a rotation is still accepted; null when none is'),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const signingKeyResource = versioned(signingKeyRecord);
export const signingKeyWithSecret = versioned(signingKeyRecord.extend({
  secret: z.string().describe('Shown only in this reply: store it now'),
}));

/** The record (no secret): the latest end of a retired secret's grace, if any is still accepted. */
export function presentSigningKey(k: SigningKey, now: Date) {
  const ends = k.retired_secrets.map((r) => r.valid_until).filter((t) => new Date(t) > now).sort();
  return { ...k, endpoint_id: k.endpoint.id, grace_period_ends_at: ends.at(-1) ?? null };
}

const queryParamName = z.string().regex(/^[A-Za-z0-9_.~-]{1,64}$/, 'Must be a query parameter name of 1 to 64 letters, digits, _ . ~ -');

export const createSigningKeyBody = z.strictObject({
  name: nameField(),
  algorithm: z.enum(SIGNING_ALGORITHMS).default('HMAC-SHA256'),
  secret: z.string().min(32).max(256).regex(/^[\x21-\x7e]+$/, 'Must be printable ASCII without spaces')
    .optional().describe(`At least 32 characters; left out, the server generates ${GENERATED_SECRET_LENGTH} random characters`),
  token_param: queryParamName.default('token'),
  expires_param: queryParamName.default('expires'),
  ip_binding_enabled: z.boolean().default(false).describe('Signed URLs also bind the client address'),
}).refine((b) => b.token_param !== b.expires_param, { path: ['expires_param'], message: 'Must differ from token_param' });
export type CreateSigningKeyInput = z.output<typeof createSigningKeyBody>;

export const rotateSigningKeyBody = z.strictObject({
  grace_period_hours: z.number().int().min(0).max(MAX_GRACE_HOURS).default(24)
    .describe('How long the replaced secret is still accepted; 0 invalidates it at once'),
}).default({ grace_period_hours: 24 });
