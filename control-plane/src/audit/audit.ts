// Audit records for operations the spec marks audit-logged: who (actor id,
// type, role), what (action, resource) and from where (address, agent, request id).
import type { Context } from 'koa';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Caller } from '../http/services.ts';
import { AuditEntry } from './audit-entry.entity.ts';

export interface AuditInput {
  /** `resource.verb`, e.g. `user.suspended`, `origin.created`. */
  action: string;
  resource_type: string;
  resource_id?: string | null;
  metadata?: Record<string, unknown>;
}

/** Queues an audit entry in the request's unit of work (flushed with the change it records). */
export function recordAudit(em: EntityManager, ctx: Context | undefined, input: AuditInput): AuditEntry {
  const caller = ctx?.state.auth as Caller | undefined;
  return em.create(AuditEntry, {
    action: input.action,
    actor_id: caller?.id ?? null,
    actor_type: caller?.type ?? 'system',
    actor_role: caller?.roles?.find((r) => r === 'superadmin') ?? caller?.roles?.[0] ?? null,
    resource_type: input.resource_type,
    resource_id: input.resource_id ?? null,
    ip_address: ctx?.ip ?? null,
    user_agent: ctx?.get('user-agent')?.slice(0, 512) || null,
    request_id: (ctx?.state.requestId as string | undefined) ?? null,
    metadata: input.metadata ?? {},
  } as never);
}
