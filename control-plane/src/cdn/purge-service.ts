// Purge requests (document 3 §3, §4.5; DESIGN.md §5). A submitted purge is
// stored `pending` with the next value of the platform-wide purge sequence;
// the control channel fans it out and moves it on (in_progress → completed or
// failed). The sequence is taken under a transaction-level advisory lock, so
// sequence order is commit order: a catching-up agent asking for "everything
// after n" can never miss a purge that committed late with a smaller number.
// After the commit the purge is announced (PURGE_SUBMITTED_CHANNEL) for the
// control channel of every replica to push.
import { recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { CoreServices } from '../core/services.ts';
import { found } from '../http/errors.ts';
import { announce, PURGE_SUBMITTED_CHANNEL } from './announcements.ts';
import { Endpoint } from './cdn.entities.ts';
import { findEndpoint } from './endpoint-service.ts';
import { listResources, type ListOptions } from './fields.ts';
import { PurgeRequest, type PurgeType } from './purge-entity.ts';
import type { PurgeInput } from './purge-record.ts';

/** pg_advisory_xact_lock key of the purge sequence ("cdnpurge" as a 64-bit number). */
const PURGE_SEQUENCE_LOCK = '7161694089093178725';

export async function submitPurge(services: Pick<CoreServices, 'store'>, rc: RequestContext, endpointId: string, input: PurgeInput): Promise<PurgeRequest> {
  const endpoint = await findEndpoint(rc, endpointId);
  const purgeType = (input.purge_type ?? input.type) as PurgeType;
  const stored = await rc.em.transactional(async (em) => {
    await em.execute(`select pg_advisory_xact_lock(${PURGE_SEQUENCE_LOCK})`);
    const [row] = await em.execute<{ n: string }[]>(`select nextval('cdn_purge_sequence')::text as n`);
    const purge = em.create(PurgeRequest, {
      distribution: em.getReference(Endpoint, endpoint.id), sequence: Number(row!.n), purge_type: purgeType,
      paths: input.paths ?? [], tags: input.tags ?? [], status: 'pending', edge_nodes_total: 0, edge_nodes_completed: 0,
      submitted_by: rc.actor?.id ?? null, completed_at: null,
    } as never);
    recordAudit(rc, {
      action: 'purge.submitted', resource_type: 'purge_request', resource_id: purge.id,
      metadata: { distribution_id: endpoint.id, purge_type: purgeType, paths: purge.paths.length, tags: purge.tags.length, sequence: purge.sequence },
    }, em);
    return purge;
  });
  announce(services, rc, PURGE_SUBMITTED_CHANNEL, { sequence: stored.sequence });
  return stored;
}

export async function findPurge(rc: RequestContext, id: string): Promise<PurgeRequest> {
  return found(await rc.em.findOne(PurgeRequest, id), 'Purge request');
}

export interface PurgeFilters { status?: string; type?: string }

/** Newest first (by sequence: commit order), with status and type filters; `distributionId` scopes it to one distribution. */
export async function listPurges(rc: RequestContext, distributionId: string | null, filters: PurgeFilters, page: Pick<ListOptions, 'cursor' | 'limit'>) {
  if (distributionId) await findEndpoint(rc, distributionId);
  const where = {
    ...(distributionId ? { distribution: distributionId } : {}),
    ...(filters.status ? { status: filters.status } : {}),
    ...(filters.type ? { purge_type: filters.type } : {}),
  };
  return listResources(rc, PurgeRequest, where, { ...page, sort: { field: 'sequence', direction: 'desc' } });
}
