// Purge requests (document 3 §3, §4.5; DESIGN.md §5). A submitted purge is
// stored `pending` with the next value of the platform-wide purge sequence;
// the control channel fans it out and moves it on (in_progress → completed or
// failed). The sequence is taken under a transaction-level advisory lock, so
// sequence order is commit order: a catching-up agent asking for "everything
// after n" can never miss a purge that committed late with a smaller number.
// After the commit the purge is announced (PURGE_SUBMITTED_CHANNEL) for the
// control channel of every replica to push; the announcement carries the
// stored purge, so a replica holding every purge before it pushes it without
// reading it back.
//
// A purge is the platform's hot write (issue 12: purge to 1,000 agents within
// 150 ms, the path within 1.2× a bare stream server's cost): the endpoint
// check, the lock, the sequence, the row and its audit entry are one
// statement, one round trip, committed on its own.
import { randomUUID } from 'node:crypto';
import { AUDIT_COLUMNS, auditParameter, auditSelect } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { found, notFound } from '../http/errors.ts';
import { announce, PURGE_SUBMITTED_CHANNEL, type PurgeAnnouncement } from './announcements.ts';
import { findEndpoint } from './endpoint-service.ts';
import { listResources, type ListOptions } from './fields.ts';
import { PurgeRequest, type PurgeType, type StoredPurge } from './purge-entity.ts';
import type { PurgeInput } from './purge-record.ts';
import type { CdnServices } from './services.ts';

/** pg_advisory_xact_lock key of the purge sequence ("cdnpurge" as a 64-bit number). */
const PURGE_SEQUENCE_LOCK = '7161694089093178725';
/** Announcements carry the purge itself up to this size; a larger one is read from the database by the replicas. */
const MAX_ANNOUNCED_BYTES = 64 * 1024;

/**
 * The statement: the sequence is drawn after the lock is taken (nextval is evaluated per joined row,
 * and `locked` yields its row once pg_advisory_xact_lock returns), and the lock is held until the
 * statement's own transaction commits, so purges commit in sequence order. No endpoint: no row, no
 * sequence drawn. `edge_nodes_total` is the nodes the purge goes to now (cdnPurgeTargets).
 */
const submitSql = (targets: string) => `
  with locked as (select pg_advisory_xact_lock(${PURGE_SEQUENCE_LOCK})),
  endpoint as (select id from cdn_endpoint where id = ?),
  stored as (
    insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, status, edge_nodes_total, edge_nodes_completed, submitted_by,
      completed_at, created_at, updated_at)
    select ?, endpoint.id, nextval('cdn_purge_sequence'), ?, ?::jsonb, ?::jsonb, 'pending', ${targets}, 0, ?, null, ?, ?
    from locked, endpoint
    returning id, distribution_id, sequence::text as sequence, purge_type, paths, tags, edge_nodes_total
  ),
  audited as (insert into audit_log (${AUDIT_COLUMNS}) ${auditSelect({ also: 'stored', metadata: `jsonb_build_object('sequence', stored.sequence::bigint)` })})
  select * from stored`;

export async function submitPurge(services: Pick<CdnServices, 'store' | 'clock' | 'cdnPurgeTargets'>, rc: RequestContext, endpointId: string, input: PurgeInput): Promise<StoredPurge> {
  const purgeType = (input.purge_type ?? input.type) as PurgeType;
  const id = randomUUID();
  const paths = input.paths ?? [];
  const tags = input.tags ?? [];
  const now = services.clock.now();
  const audit = auditParameter(rc, {
    action: 'purge.submitted', resource_type: 'purge_request', resource_id: id,
    metadata: { distribution_id: endpointId, purge_type: purgeType, paths: paths.length, tags: tags.length },
  }, now);
  const [row] = await rc.em.execute<{ id: string; distribution_id: string; sequence: string; purge_type: PurgeType; paths: string[]; tags: string[]; edge_nodes_total: number }[]>(
    submitSql(services.cdnPurgeTargets ?? '0'),
    [endpointId, id, purgeType, JSON.stringify(paths), JSON.stringify(tags), rc.actor?.id ?? null, now, now, audit],
  );
  if (!row) throw notFound('Endpoint');
  const stored: StoredPurge = {
    id: row.id, distribution_id: row.distribution_id, sequence: Number(row.sequence), purge_type: row.purge_type, paths: row.paths, tags: row.tags,
    status: 'pending', edge_nodes_total: row.edge_nodes_total, edge_nodes_completed: 0, submitted_by: rc.actor?.id ?? null, completed_at: null,
    created_at: now, updated_at: now,
  };
  const purge = { id: stored.id, sequence: stored.sequence, distribution_id: stored.distribution_id, purge_type: stored.purge_type, paths, tags };
  const message: PurgeAnnouncement = JSON.stringify(purge).length <= MAX_ANNOUNCED_BYTES ? { sequence: stored.sequence, purge } : { sequence: stored.sequence };
  announce(services, rc, PURGE_SUBMITTED_CHANNEL, message);
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
