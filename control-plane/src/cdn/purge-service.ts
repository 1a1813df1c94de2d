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
// A purge names one endpoint, or none: a top-level purge of plain paths, tags
// or everything without distribution_id applies to every endpoint (stored
// with distribution_id null; the edge applies it to each endpoint it holds).
//
// A purge is the platform's hot write (issue 12: purge to 1,000 agents within
// 150 ms, the path within 1.2× a bare stream server's cost): the endpoint
// check, the lock, the sequence, the row and its audit entry are one
// statement, one round trip, committed on its own.
import { randomUUID } from 'node:crypto';
import { AUDIT_COLUMNS, auditParameter, auditSelect } from '../audit/audit.ts';
import { statementsOf, type RequestContext } from '../core/request-context.ts';
import { executeBound } from '../db/bulk.ts';
import { ApiError, found, notFound, validationError, type FieldError } from '../http/errors.ts';
import { REPLAY_WINDOW_MS } from '../http/idempotency.ts';
import type { StatementIdempotency } from '../http/route.ts';
import { announce, PURGE_SUBMITTED_CHANNEL, type PurgeAnnouncement } from './announcements.ts';
import { findEndpoint } from './endpoint-service.ts';
import { listResources, type ListOptions } from './fields.ts';
import { PurgeRequest, type PurgeType, type StoredPurge } from './purge-entity.ts';
import { purgeUrl, type PurgeInput, type TopLevelPurgeInput } from './purge-record.ts';
import type { CdnServices } from './services.ts';

/** pg_advisory_xact_lock key of the purge sequence ("cdnpurge" as a 64-bit number). */
const PURGE_SEQUENCE_LOCK = '7161694089093178725';
/** Announcements carry the purge itself up to this size; a larger one is read from the database by the replicas. */
const MAX_ANNOUNCED_BYTES = 64 * 1024;

/**
 * The statement: the sequence is drawn after the lock is taken (nextval is evaluated per joined row,
 * and `locked` yields its row once pg_advisory_xact_lock returns), and the lock is held until the
 * statement's own transaction commits, so purges commit in sequence order. No endpoint: no row, no
 * sequence drawn. `edge_nodes_total` is the nodes the purge goes to now ($13, cdnPurgeTargets). The row
 * claims the submission's Idempotency-Key (null without one): a key already held stores nothing and
 * draws no number (a duplicate that committed while this one waited for the lock is not in the
 * statement's snapshot: then the insert does nothing on the key's unique index, and its number is skipped).
 * Its parameters are bound ($1…$13, executeBound), not spliced into the text: escaping the audit entry's
 * JSON character by character was most of the statement's client-side cost (issue 21 item 10).
 */
const submitSql = (everyEndpoint: boolean) => `
  with locked as (select pg_advisory_xact_lock(${PURGE_SEQUENCE_LOCK})),
  endpoint as (${everyEndpoint ? 'select $1::uuid as id where' : 'select id from cdn_endpoint where id = $1::uuid and'}
    not exists (select 1 from cdn_purge_request where idempotency_key = $2::text)),
  stored as (
    insert into cdn_purge_request (id, distribution_id, sequence, purge_type, paths, tags, soft, status, edge_nodes_total, edge_nodes_completed, submitted_by,
      completed_at, created_at, updated_at, idempotency_key, request_fingerprint)
    select $3::uuid, endpoint.id, nextval('cdn_purge_sequence'), $4, $5::jsonb, $6::jsonb, $14::boolean, 'pending', $13::int, 0, $7::uuid, null, $8::timestamptz, $9::timestamptz, $10::text, $11::text
    from locked, endpoint
    on conflict (idempotency_key) do nothing
    returning id, distribution_id, sequence::text as sequence, purge_type, paths, tags, soft, edge_nodes_total
  ),
  audited as (insert into audit_log (${AUDIT_COLUMNS}) ${auditSelect({ also: 'stored', metadata: `jsonb_build_object('sequence', stored.sequence::bigint)`, parameter: '$12' })})
  select * from stored`;
/** The statement's text per scope (one endpoint, every endpoint). */
const submitStatement = (everyEndpoint: boolean): string => (everyEndpoint ? SUBMIT_EVERY_ENDPOINT : SUBMIT_ONE_ENDPOINT);
const SUBMIT_ONE_ENDPOINT = submitSql(false);
const SUBMIT_EVERY_ENDPOINT = submitSql(true);

/** The columns the submission reads back of a purge row. */
interface SubmittedRow {
  id: string;
  distribution_id: string | null;
  sequence: string;
  purge_type: PurgeType;
  paths: string[];
  tags: string[];
  soft: boolean;
  edge_nodes_total: number;
}

/** A purge as its submission answers it: pending, no node done yet. */
function asSubmitted(row: SubmittedRow, submittedBy: string | null, at: Date): StoredPurge {
  return {
    id: row.id, distribution_id: row.distribution_id, sequence: Number(row.sequence), purge_type: row.purge_type, paths: row.paths, tags: row.tags, soft: row.soft,
    status: 'pending', edge_nodes_total: row.edge_nodes_total, edge_nodes_completed: 0, submitted_by: submittedBy, completed_at: null,
    created_at: at, updated_at: at,
  };
}

/** A purge submitted, or (`replayed`) the one an earlier submission with the same Idempotency-Key stored. */
export interface SubmittedPurge {
  purge: StoredPurge;
  replayed: boolean;
}

/**
 * The purge an earlier submission stored under `idempotency` (within REPLAY_WINDOW_MS), as that submission answered it
 * (pending, no node done yet; edge_nodes_total as stored now); IDEMPOTENCY_KEY_REUSED for another request. null: no live
 * purge holds the key; RELEASED: the one holding it was past the window and let it go, so the key can be used again.
 */
const RELEASED = Symbol('released');

async function claimedPurge(services: Pick<CdnServices, 'clock' | 'db'>, rc: RequestContext, idempotency: StatementIdempotency): Promise<StoredPurge | typeof RELEASED | null> {
  const em = statementsOf(rc, services.db);
  const [row] = await executeBound<SubmittedRow & { submitted_by: string | null; created_at: Date; request_fingerprint: string | null }>(em,
    `select id, distribution_id, sequence::text as sequence, purge_type, paths, tags, soft, edge_nodes_total, submitted_by, created_at, request_fingerprint
     from cdn_purge_request where idempotency_key = $1::text`, [idempotency.key]);
  if (!row) return null;
  const createdAt = new Date(row.created_at);
  if (createdAt.getTime() <= services.clock.now().getTime() - REPLAY_WINDOW_MS) {
    await executeBound(em, `update cdn_purge_request set idempotency_key = null, request_fingerprint = null where idempotency_key = $1::text and id = $2::uuid`, [idempotency.key, row.id]);
    return RELEASED;
  }
  if (row.request_fingerprint !== idempotency.fingerprint) throw new ApiError('IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was used with a different request');
  return asSubmitted(row, row.submitted_by, createdAt);
}

/**
 * Submits a purge of one endpoint, or of every endpoint (`endpointId` null). With an Idempotency-Key the purge row
 * claims it in the same statement (its unique idempotency_key): a second submission with the key stores nothing and is
 * answered the first one's purge (or IDEMPOTENCY_KEY_REUSED for another request); a concurrent one waits for the
 * first's commit on the sequence lock and the key's index entry.
 */
export async function submitPurge(services: Pick<CdnServices, 'store' | 'clock' | 'cdnPurgeTargets' | 'db'>, rc: RequestContext, endpointId: string | null, input: PurgeInput,
  idempotency?: StatementIdempotency): Promise<SubmittedPurge> {
  for (let attempt = 0; attempt < 2; attempt++) {
    const purge = await storePurge(services, rc, endpointId, input, idempotency);
    if (purge) return { purge, replayed: false };
    if (!idempotency) break;
    const earlier = await claimedPurge(services, rc, idempotency);
    if (earlier === null) break; // no purge holds the key: the endpoint is missing
    if (earlier !== RELEASED) return { purge: earlier, replayed: true };
    // The claim was past its window and is released: the submission runs again.
  }
  throw notFound('Endpoint');
}

async function storePurge(services: Pick<CdnServices, 'store' | 'clock' | 'cdnPurgeTargets' | 'db'>, rc: RequestContext, endpointId: string | null, input: PurgeInput,
  idempotency: StatementIdempotency | undefined): Promise<StoredPurge | null> {
  const purgeType = (input.purge_type ?? input.type) as PurgeType;
  const id = randomUUID();
  const paths = input.paths ?? [];
  const tags = input.tags ?? [];
  const now = services.clock.now();
  const audit = auditParameter(rc, {
    action: 'purge.submitted', resource_type: 'purge_request', resource_id: id,
    metadata: { distribution_id: endpointId, purge_type: purgeType, paths: paths.length, tags: tags.length, soft: input.soft === true },
  }, now);
  // A raw statement on the pool (or the caller's transaction): no entity manager forked for it.
  const em = statementsOf(rc, services.db);
  const targets = services.cdnPurgeTargets ? await services.cdnPurgeTargets(em) : 0;
  const [row] = await executeBound<SubmittedRow>(em, submitStatement(endpointId === null),
    [endpointId, idempotency?.key ?? null, id, purgeType, JSON.stringify(paths), JSON.stringify(tags), rc.actor?.id ?? null, now, now, idempotency?.key ?? null, idempotency?.fingerprint ?? null, audit, targets, input.soft === true],
  );
  if (!row) return null;
  const stored = asSubmitted(row, rc.actor?.id ?? null, now);
  const purge = { id: stored.id, sequence: stored.sequence, distribution_id: stored.distribution_id, purge_type: stored.purge_type, paths, tags, soft: stored.soft };
  const message: PurgeAnnouncement = JSON.stringify(purge).length <= MAX_ANNOUNCED_BYTES ? { sequence: stored.sequence, purge } : { sequence: stored.sequence };
  announce(services, rc, PURGE_SUBMITTED_CHANNEL, message);
  return stored;
}

/**
 * The top-level submission (issue 21 item 9): the distribution named, or the endpoint serving the host of the full
 * URLs in paths (its CDN hostname or a validated custom domain: every URL's host must be that endpoint's), or,
 * with neither, every endpoint. Full URLs are stored as their path and query. An unknown host, or hosts of
 * several endpoints, is a 400 naming the path.
 */
export async function submitTopLevelPurge(services: Pick<CdnServices, 'store' | 'clock' | 'cdnPurgeTargets' | 'db'>, rc: RequestContext, body: TopLevelPurgeInput,
  idempotency?: StatementIdempotency): Promise<SubmittedPurge> {
  const { distribution_id: named, ...input } = body;
  const urls = (input.paths ?? []).map(purgeUrl);
  if (!urls.length || urls[0] === null) return submitPurge(services, rc, named ?? null, input, idempotency);
  const hosts = [...new Set(urls.map((u) => u!.hostname.toLowerCase().replace(/\.$/, '')))];
  const rows = await rc.em.execute<{ host: string; endpoint_id: string }[]>(
    `select hostname as host, id as endpoint_id from cdn_endpoint where hostname = any(array(select jsonb_array_elements_text(?::jsonb)))
     union all select hostname, endpoint_id from cdn_custom_domain where hostname = any(array(select jsonb_array_elements_text(?::jsonb))) and certificate_pem is not null`,
    [JSON.stringify(hosts), JSON.stringify(hosts)],
  );
  const owner = new Map(rows.map((r) => [r.host, r.endpoint_id]));
  const endpointId = named ?? owner.get(hosts[0]!) ?? null;
  const problems: FieldError[] = [];
  urls.forEach((url, i) => {
    const host = url!.hostname.toLowerCase().replace(/\.$/, '');
    const of = owner.get(host);
    if (of === undefined) problems.push({ field: `paths[${i}]`, message: `No endpoint serves ${host} (an endpoint's hostname or a validated custom domain)` });
    else if (of !== endpointId) {
      problems.push({ field: `paths[${i}]`, message: named ? `${host} is not a hostname of distribution ${named}` : `${host} is another endpoint's than paths[0]'s: purge each endpoint's URLs apart` });
    }
  });
  if (problems.length) throw validationError(problems);
  const paths = urls.map((u) => (input.purge_type ?? input.type) === 'wildcard' ? u!.pathname : u!.pathname + u!.search);
  return submitPurge(services, rc, endpointId, { ...input, paths }, idempotency);
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
