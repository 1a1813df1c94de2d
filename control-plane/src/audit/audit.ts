// Audit records for operations the spec marks audit-logged: who (actor id,
// type, role), what (action, resource) and from where (address, agent, request id).
import type { RequestContext } from '../core/request-context.ts';
import { AuditEntry } from './audit-entry.entity.ts';

export interface AuditInput {
  /** `resource.verb`, e.g. `user.suspended`, `origin.created`. */
  action: string;
  resource_type: string;
  resource_id?: string | null;
  metadata?: Record<string, unknown>;
}

/** Queues an audit entry in the request's unit of work (flushed with the change it records). */
export function recordAudit(rc: RequestContext, input: AuditInput): AuditEntry {
  const caller = rc.actor;
  return rc.em.create(AuditEntry, {
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
