// The Signing key record of document 3 §2 and its request bodies. The secret
// is shown once, in the reply to create and rotate (signingKeyWithSecret);
// every other reply, list and audit entry carries no trace of it.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { timestamp, timestampOrNull, withExample } from '../http/schemas.ts';
import { SIGNING_ALGORITHMS, SIGNING_KEY_STATUSES, type SigningKey } from './policies.entities.ts';
import { signingKeySnapshot } from '../../../shared/src/config/snapshot.ts';
import { nameField } from './fields.ts';

const edge = signingKeySnapshot.shape;

/**
 * The signed-URL algorithm as the edge verifies it (shared/src/signing/signed-url.ts; "Signed URLs" in docs/guides/protecting-endpoints.md has the same text and
 * `npm run sign-url` implements it), quoted by the signing-key operations.
 */
export const SIGNED_URL_ALGORITHM = 'With token_auth_enabled on the endpoint, the edge serves a request only when its query carries expires_param and '
  + 'token_param signed by one of the endpoint\'s active keys (any of them; during a rotation\'s grace period the replaced secret too, until '
  + 'grace_period_ends_at); otherwise 403, the same answer for a missing, malformed, wrongly signed, expired or IP-mismatched URL. '
  + 'To sign: `canonical = path + "\\n" + expires` (with ip_binding_enabled: `path + "\\n" + expires + "\\n" + client_ip`); '
  + '`signature = base64url(HMAC(algorithm, secret, canonical))`, unpadded (43 characters for HMAC-SHA256, 86 for HMAC-SHA512); the token is the signature '
  + '(with ip_binding_enabled: `client_ip + "~" + signature`); the URL is the path, its other query parameters, then `expires_param=<expires>&token_param=<token>`. '
  + 'path is the URL path as the edge normalises it (dot segments removed, no query); expires is a Unix time in seconds, accepted up to and including that '
  + 'second; client_ip is the viewer\'s address (IPv6 compact lower case, IPv4-mapped as IPv4); secret is the key\'s secret as UTF-8. Other query '
  + 'parameters are not signed; the two signature parameters are removed before the cache key and the origin request are made, so every signed copy of '
  + 'a URL is one cached object. Worked example: secret `example-secret-for-the-docs-only-0123456789`, path `/videos/intro.mp4`, expires 1767225600, '
  + 'HMAC-SHA256: canonical `/videos/intro.mp4\\n1767225600`, URL `/videos/intro.mp4?expires=1767225600&token=prz1uB7enDKQNv6UWL8vAT2n4ELDSOobiUIcf1jCES4` '
  + '(`printf \'/videos/intro.mp4\\n1767225600\' | openssl dgst -sha256 -hmac <secret> -binary | base64 | tr +/ -_ | tr -d =` gives the token). '
  + '`npm run sign-url -- --url https://<hostname>/videos/intro.mp4 --secret-file <file> --expires-in 3600` prints a signed URL. '
  + 'The same keys also sign prefix tokens, one token for every path under a pattern (a whole playback): '
  + '`payload = [st=<start>~]exp=<expires>~acl=<base64url(pattern)>[~ip=<client_ip>]`, `token = payload + "~hmac=" + base64url(HMAC(algorithm, secret, payload))`, '
  + 'pattern a normalised path or a prefix ending in `*`; the edge reads it under token_param from the query, a path segment '
  + '(`/videos/123/<token_param>=<token>/index.m3u8`, removed before the cache key and the origin request) or a cookie; '
  + '`npm run sign-url -- --acl \'/videos/123/*\' ...` prints each form (docs/guides/protecting-endpoints.md, "Prefix tokens").';

export const MAX_GRACE_HOURS = 168;
export const GENERATED_SECRET_LENGTH = 64;

export const signingKeyRecord = z.object({
  id: z.uuid(),
  endpoint_id: z.uuid(),
  name: z.string(),
  algorithm: z.enum(SIGNING_ALGORITHMS),
  status: z.enum(SIGNING_KEY_STATUSES),
  token_param: z.string().describe('The query parameter carrying the token'),
  expires_param: z.string().describe('The query parameter carrying the expiry (Unix seconds)'),
  ip_binding_enabled: z.boolean().describe('Signed URLs also cover the viewer\'s address and work from that address only'),
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

export const createSigningKeyBody = withExample(z.strictObject({
  name: nameField(),
  algorithm: edge.algorithm,
  secret: z.string().min(32).max(256).regex(/^[\x21-\x7e]+$/, 'Must be printable ASCII without spaces')
    .optional().describe(`At least 32 characters; left out, the server generates ${GENERATED_SECRET_LENGTH} random characters`),
  // The edge's own defaults (one declaration); the API bounds the names more tightly than the snapshot.
  token_param: queryParamName.default(edge.token_param.parse(undefined)),
  expires_param: queryParamName.default(edge.expires_param.parse(undefined)),
  ip_binding_enabled: edge.ip_binding_enabled.describe('Signed URLs also bind the client address'),
}).refine((b) => b.token_param !== b.expires_param, { path: ['expires_param'], message: 'Must differ from token_param' }),
// No secret: the server generates one and shows it once.
{ name: 'Player URLs', algorithm: 'HMAC-SHA256', token_param: 'token', expires_param: 'expires', ip_binding_enabled: false });
export type CreateSigningKeyInput = z.output<typeof createSigningKeyBody>;

export const rotateSigningKeyBody = z.strictObject({
  grace_period_hours: z.number().int().min(0).max(MAX_GRACE_HOURS).default(24)
    .describe('How long the replaced secret is still accepted; 0 invalidates it at once'),
}).default({ grace_period_hours: 24 });
