// The audit trail shared by all three APIs: for every operation the spec marks
// audit-logged, who acted (actor id, type and role), what (action such as
// `user.suspended`, resource type and id), why (reason or note), what changed
// (fields with their old and new values, secrets masked) and from where
// (address, user agent, request id). An entry is queued in the unit of work of
// the change it records and committed with it, in one transaction: a change
// is never stored without its entry, nor an entry without its change.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RequestContext } from '../core/request-context.ts';
import { AuditEntry } from './audit-entry.entity.ts';

/** Old and new value of each changed field. */
export type AuditChanges = Record<string, { from: unknown; to: unknown }>;

export interface AuditInput {
  /** `resource.verb`, e.g. `user.suspended`, `origin.created`. */
  action: string;
  resource_type: string;
  resource_id?: string | null;
  /** The reason or note the actor gave. */
  reason?: string | null;
  /** What changed (see changesOf); secret fields are masked on the way in. */
  changes?: AuditChanges;
  /** Anything else worth keeping about the operation. */
  metadata?: Record<string, unknown>;
}

/** Field names whose values never enter the trail (passwords, tokens, keys, PINs, card data...). */
const SECRET_FIELD = /pass(word)?|secret|token|(^|_)key($|_)|private|hash|(^|_)pin($|_)|card_?number|cvc|cvv|iban|signature/i;
export const MASKED = '[redacted]';

const mask = (field: string, value: unknown) => (SECRET_FIELD.test(field) && value !== null && value !== undefined ? MASKED : value);

function serialisable(value: unknown): unknown {
  return value instanceof Date ? value.toISOString() : value;
}

/**
 * The fields of `after` whose values differ from `before`, as old → new,
 * secrets masked. Values compare by their JSON form (dates, arrays, objects).
 */
export function changesOf<T extends object>(before: Partial<T>, after: Partial<T>, fields: readonly (keyof T & string)[] = Object.keys(after) as (keyof T & string)[]): AuditChanges {
  const changes: AuditChanges = {};
  for (const field of fields) {
    const from = serialisable(before[field]);
    const to = serialisable(after[field]);
    if (JSON.stringify(from ?? null) !== JSON.stringify(to ?? null)) changes[field] = { from: mask(field, from ?? null), to: mask(field, to ?? null) };
  }
  return changes;
}

/** Masks every value under a secret field name, at any depth (`{password: {from, to}}` keeps its shape). */
function maskDeep(value: unknown, secret = false): unknown {
  if (Array.isArray(value)) return value.map((v) => maskDeep(v, secret));
  if (value && typeof value === 'object' && !(value instanceof Date)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, maskDeep(v, secret || SECRET_FIELD.test(k))]));
  }
  return secret && value !== null && value !== undefined ? MASKED : serialisable(value);
}

// Most privileged first: the role an entry names is the strongest the actor held.
const ROLE_RANK = ['superadmin', 'admin', 'operator', 'viewer', 'partner', 'subscriber'];

/** The role the actor acted with: the most privileged of those it holds (a CDN operator who is also a subscriber acted as operator). */
function actingRole(roles: readonly string[] | undefined): string | null {
  if (!roles?.length) return null;
  for (const role of ROLE_RANK) if (roles.includes(role)) return role;
  return roles[0]!;
}

/** The columns of the entry recording `input` for rc's actor (secrets masked), as stored. */
export function auditValues(rc: RequestContext, input: AuditInput) {
  const actor = rc.actor;
  const metadata: Record<string, unknown> = { ...(maskDeep(input.metadata ?? {}) as Record<string, unknown>) };
  if (input.reason !== undefined) metadata.reason = input.reason;
  if (input.changes && Object.keys(input.changes).length) metadata.changes = maskDeep(input.changes);
  return {
    action: input.action,
    actor_id: actor?.type === 'system' ? null : actor?.id ?? null,
    actor_type: actor?.type ?? 'system',
    actor_role: actingRole(actor?.roles),
    resource_type: input.resource_type,
    resource_id: input.resource_id ?? null,
    ip_address: rc.ip || null,
    user_agent: rc.userAgent || null,
    request_id: rc.requestId,
    metadata,
  };
}

/**
 * Queues an audit entry in the unit of work of the change it records (the
 * request's, or a transaction's `em` when the change runs in one), so both
 * are committed together.
 */
export function recordAudit(rc: RequestContext, input: AuditInput, em: EntityManager = rc.em): AuditEntry {
  return em.create(AuditEntry, auditValues(rc, input) as never);
}

/**
 * The same entry written by a statement of the caller's own, in the statement that makes the
 * change (a hot path storing its change and its entry in one round trip): the `select` that
 * follows `insert into audit_log (${AUDIT_COLUMNS})`. The entry's values travel as one JSON
 * parameter (auditParameter, the statement's `?` here); `also` names relations of the
 * statement to join (`stored`), `metadata` SQL merged into the entry's metadata, for values
 * only the statement knows (a sequence number it drew), and `parameter` the placeholder when the statement's
 * parameters are bound (`$n`, executeBound).
 */
export const AUDIT_COLUMNS = 'id, action, actor_id, actor_type, actor_role, resource_type, resource_id, ip_address, user_agent, request_id, metadata, created_at';
export function auditSelect(options: { also?: string; metadata?: string; parameter?: string } = {}): string {
  return `select gen_random_uuid(), a.action, a.actor_id, a.actor_type, a.actor_role, a.resource_type, a.resource_id, a.ip_address, a.user_agent,
    a.request_id, a.metadata || ${options.metadata ?? `'{}'::jsonb`}, a.created_at from jsonb_populate_record(null::audit_log, ${options.parameter ?? '?'}::jsonb) a${options.also ? `, ${options.also}` : ''}`;
}
export const auditParameter = (rc: RequestContext, input: AuditInput, at: Date): string => JSON.stringify({ ...auditValues(rc, input), created_at: at });
