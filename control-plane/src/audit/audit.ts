// Audit records for operations the spec marks audit-logged: who (actor id,
// type, role), what (action, resource) and from where (address, agent, request id).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RequestContext } from '../core/request-context.ts';
import { AuditEntry } from './audit-entry.entity.ts';

export interface AuditInput {
  /** `resource.verb`, e.g. `user.suspended`, `origin.created`. */
  action: string;
  resource_type: string;
  resource_id?: string | null;
  metadata?: Record<string, unknown>;
}

/**
 * Queues an audit entry in the unit of work of the change it records (the
 * request's, or the transaction's `em` when the change runs in one), so both
 * are committed together.
 */
export function recordAudit(rc: RequestContext, input: AuditInput, em: EntityManager = rc.em): AuditEntry {
  const caller = rc.actor;
  return em.create(AuditEntry, {
    action: input.action,
    actor_id: caller?.id ?? null,
    actor_type: caller?.type ?? 'system',
    actor_role: caller?.roles?.find((r) => r === 'superadmin') ?? caller?.roles?.[0] ?? null,
    resource_type: input.resource_type,
    resource_id: input.resource_id ?? null,
    ip_address: rc.ip || null,
    user_agent: rc.userAgent || null,
    request_id: rc.requestId,
    metadata: input.metadata ?? {},
  } as never);
}
