// Signing keys of an endpoint, document 3 §4.8. Secrets are sealed at rest
// (the secret box, bound to the key's id) and leave the service only in the
// reply to create and rotate. A rotation keeps the replaced secret, sealed,
// until its grace period ends (the edge accepts it until valid_until; the
// sweep job drops it from storage afterwards); 0 hours drops it at once, with
// every secret replaced before that is still in its grace.
import { randomBytes } from 'node:crypto';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { HOUR } from '../core/clock.ts';
import type { RequestContext } from '../core/request-context.ts';
import { raw } from '@mikro-orm/core';
import { findEndpoint } from './endpoint-service.ts';
import { findEndpointChild } from './endpoint-scoped.ts';
import { resourceInUse } from './fields.ts';
import { GENERATED_SECRET_LENGTH, type CreateSigningKeyInput } from './signing-key-record.ts';
import { SigningKey, type RetiredSecret } from './policies.entities.ts';
import type { CdnServices } from './services.ts';

/** Retired secrets kept at most (the ones ending soonest go first). */
export const MAX_RETIRED_SECRETS = 10;
const SIGNING_KEY_FIELDS = ['name', 'algorithm', 'status', 'token_param', 'expires_param', 'ip_binding_enabled'] as const satisfies readonly (keyof SigningKey)[];
const snapshot = (k: SigningKey) => ({ ...Object.fromEntries(SIGNING_KEY_FIELDS.map((f) => [f, k[f]])), endpoint_id: k.endpoint.id }) as Record<string, unknown>;
const aad = (id: string) => `cdn_signing_key:${id}`;

/** 64 characters of base64url: 384 random bits. */
export const generateSecret = () => randomBytes((GENERATED_SECRET_LENGTH * 3) / 4).toString('base64url');

export const findSigningKey = (rc: RequestContext, endpointId: string, id: string) => findEndpointChild(rc, SigningKey, endpointId, id, 'Signing key');

/** A signing secret sealed for storage (bound to its key's id). */
export const sealSigningSecret = (app: Pick<CdnServices, 'secretBox'>, keyId: string, secret: string) => app.secretBox.seal(secret, aad(keyId));

/** The key's current and still-accepted secrets (for the edge snapshot): the current one first. */
export function signingSecrets(app: CdnServices, key: SigningKey): { secret: string; valid_until: string | null }[] {
  const now = app.clock.now();
  return [
    { secret: app.secretBox.openString(key.secret_sealed, aad(key.id)), valid_until: null },
    ...key.retired_secrets.filter((r) => new Date(r.valid_until) > now).map((r) => ({ secret: app.secretBox.openString(r.secret_sealed, aad(key.id)), valid_until: r.valid_until })),
  ];
}

const unexpired = (retired: RetiredSecret[], now: Date) => retired.filter((r) => new Date(r.valid_until) > now);

export async function createSigningKey(app: CdnServices, rc: RequestContext, endpointId: string, input: CreateSigningKeyInput): Promise<{ key: SigningKey; secret: string }> {
  const endpoint = await findEndpoint(rc, endpointId);
  const { secret: given, ...values } = input;
  const secret = given ?? generateSecret();
  const id = crypto.randomUUID();
  const key = rc.em.create(SigningKey, {
    ...values, id, endpoint, status: 'active', secret_sealed: app.secretBox.seal(secret, aad(id)), retired_secrets: [], rotated_at: null,
  } as never);
  recordAudit(rc, { action: 'signing_key.created', resource_type: 'signing_key', resource_id: key.id, changes: changesOf({}, snapshot(key)), metadata: { secret_generated: !given } });
  await rc.em.flush();
  return { key, secret };
}

export async function rotateSigningKey(app: CdnServices, rc: RequestContext, endpointId: string, id: string, graceHours: number): Promise<{ key: SigningKey; secret: string }> {
  const key = await findSigningKey(rc, endpointId, id);
  const now = app.clock.now();
  // No grace ends every secret replaced before too, those of earlier rotations still in their grace included.
  const retired = graceHours > 0 ? unexpired(key.retired_secrets, now) : [];
  if (graceHours > 0) retired.push({ secret_sealed: key.secret_sealed, valid_until: new Date(now.getTime() + graceHours * HOUR).toISOString() });
  retired.sort((a, b) => b.valid_until.localeCompare(a.valid_until));
  const secret = generateSecret();
  key.secret_sealed = app.secretBox.seal(secret, aad(key.id));
  key.retired_secrets = retired.slice(0, MAX_RETIRED_SECRETS);
  key.rotated_at = now;
  recordAudit(rc, { action: 'signing_key.rotated', resource_type: 'signing_key', resource_id: key.id, metadata: { grace_period_hours: graceHours, secrets_accepted: 1 + key.retired_secrets.length } });
  await rc.em.flush();
  return { key, secret };
}

/**
 * Signed URLs made with the key stop working at once. The last active key is
 * kept (409 RESOURCE_IN_USE) while the endpoint has token authentication on.
 */
export async function deleteSigningKey(rc: RequestContext, endpointId: string, id: string): Promise<void> {
  const key = await findSigningKey(rc, endpointId, id);
  const endpoint = await findEndpoint(rc, endpointId);
  if (endpoint.token_auth_enabled) {
    const others = await rc.em.count(SigningKey, { endpoint: endpointId, status: 'active', id: { $ne: key.id } });
    if (others === 0) throw resourceInUse('This is the endpoint\'s last active signing key and token authentication is enabled; disable it (token_auth_enabled false) or add another key first');
  }
  recordAudit(rc, { action: 'signing_key.deleted', resource_type: 'signing_key', resource_id: key.id, changes: changesOf(snapshot(key), {}) });
  rc.em.remove(key);
  await rc.em.flush();
}

/** Drops retired secrets whose grace has ended (the sweep job); how many keys changed. */
export async function sweepRetiredSecrets(app: CdnServices, rc: RequestContext): Promise<number> {
  const now = app.clock.now();
  const keys = await rc.em.find(SigningKey, { [raw<symbol>((alias) => `jsonb_array_length(${alias}.retired_secrets) > 0`)]: [] } as never);
  let changed = 0;
  for (const key of keys) {
    const kept = unexpired(key.retired_secrets, now);
    if (kept.length === key.retired_secrets.length) continue;
    key.retired_secrets = kept;
    changed++;
  }
  await rc.em.flush();
  return changed;
}
