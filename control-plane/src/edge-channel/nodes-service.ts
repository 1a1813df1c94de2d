// The edge nodes as the control plane sees them (document 3 §2 "Edge node",
// §4.13; DESIGN.md §7): the list with its filters, how far a configuration
// version has propagated (FleetView), the deploying → active move of
// endpoints, origin health aggregated over the nodes online now, and the
// sweep that marks silent nodes offline. "Online" here means online or
// draining: a draining node still serves (and is still sent purges) until its
// stream ends.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { HealthStatus, ListOptions, OriginHealthReading } from '../cdn/index.ts';
import type { RequestContext } from '../core/request-context.ts';
import { executeBound, idList, ids, recordset } from '../db/bulk.ts';
import { paginate } from '../http/paging.ts';
import type { ConfigSource, PropagationCounts } from '../cdn-config/index.ts';
import { EdgeNode, type EdgeNodeStatus } from './nodes-entity.ts';

/** SQL condition of a node that counts as online (serving, reachable through a stream). */
export const ONLINE = `status in ('online', 'draining')`;

/** The nodes online now: those a purge stored now goes to (cdn's cdnPurgeTargets; nodes connecting later catch up by sequence). */
export async function onlineNodeCount(em: EntityManager): Promise<number> {
  const [row] = await executeBound<{ n: number }>(em, `select count(*)::int as n from cdn_edge_node where ${ONLINE}`, []);
  return row!.n;
}

export interface EdgeNodeFilters { status?: EdgeNodeStatus; region?: string; config_synced?: boolean }

/** The active version's number, 0 before the first publish (a node is synced when it holds exactly this). */
export async function activeVersionNumber(source: ConfigSource | undefined): Promise<number> {
  return (await source?.active())?.version ?? 0;
}

/** One page of edge nodes by hostname; config_synced compares each node's applied version with the active one. */
export async function listEdgeNodes(rc: RequestContext, source: ConfigSource | undefined, filters: EdgeNodeFilters, page: Pick<ListOptions, 'cursor' | 'limit'>) {
  const active = await activeVersionNumber(source);
  const where: Record<string, unknown> = {};
  if (filters.status) where.status = filters.status;
  if (filters.region) where.region = filters.region;
  if (filters.config_synced !== undefined) where.config_version = filters.config_synced ? active : { $ne: active };
  const found = await paginate(rc.em, EdgeNode, { where: where as never, limit: page.limit, cursor: page.cursor, sort: { field: 'hostname', direction: 'asc' } });
  return { items: found.items.map((node) => ({ ...node, config_synced: node.config_version === active })), meta: found.meta };
}

export interface ShieldRegion {
  id: string;
  name: string;
  location: { country_code: string | null; city: string | null };
  available: boolean;
  latency_hint_ms: number | null;
}

/**
 * The shield regions (document 3 "Shield regions"): every region with a node willing to shield (a shield address in
 * its Hello), whatever its status; named, placed and located as its most recently seen node says (the id when none
 * says); available while one of those nodes is online and the online nodes of other regions reach it (unless all of
 * those that measured it last found none of its nodes answering: refused or silent); latency_hint_ms the median of
 * what the online nodes of other regions last measured to it (null before any reached it).
 */
export async function listShieldRegions(em: EntityManager): Promise<ShieldRegion[]> {
  const rows = await em.execute<{ region: string; name: string | null; country: string | null; city: string | null; available: boolean; latency: number | null }[]>(
    `with shields as (
       select region,
         (array_agg(region_name order by last_seen_at desc nulls last) filter (where region_name is not null))[1] as name,
         (array_agg(region_country_code order by last_seen_at desc nulls last) filter (where region_country_code is not null))[1] as country,
         (array_agg(region_city order by last_seen_at desc nulls last) filter (where region_city is not null))[1] as city,
         bool_or(status = 'online') as available
       from cdn_edge_node where shield_address is not null group by region)
     select s.region, s.name, s.country, s.city,
       s.available and (
         not exists (select 1 from cdn_edge_node n where n.status = 'online' and n.region <> s.region and n.shield_latencies ? s.region)
         or exists (select 1 from cdn_edge_node n where n.status = 'online' and n.region <> s.region and jsonb_typeof(n.shield_latencies -> s.region) = 'number')
       ) as available,
       (select round(percentile_cont(0.5) within group (order by (n.shield_latencies ->> s.region)::numeric))::int
          from cdn_edge_node n where n.status = 'online' and n.region <> s.region and n.shield_latencies ? s.region) as latency
     from shields s order by s.region`,
  );
  return rows.map((r) => ({
    id: r.region, name: r.name ?? r.region, location: { country_code: r.country, city: r.city }, available: r.available, latency_hint_ms: r.latency,
  }));
}

/** FleetView.propagation: counted over the nodes online now (cdn-config/contracts.ts). */
export async function propagation(em: EntityManager, versionNumber: number): Promise<PropagationCounts> {
  const [row] = await em.execute<{ total: number; synced: number; failed: number }[]>(
    `select count(*)::int as total,
       count(*) filter (where config_version >= ?)::int as synced,
       count(*) filter (where config_version < ? and failed_config_version >= ?)::int as failed
     from cdn_edge_node where ${ONLINE}`,
    [versionNumber, versionNumber, versionNumber],
  );
  const { total, synced, failed } = row ?? { total: 0, synced: 0, failed: 0 };
  return { total_nodes: total, synced_nodes: synced, pending_nodes: total - synced - failed, failed_nodes: failed };
}

/** An online node that refused a configuration version it has not applied since (its refusal stands). */
interface Refusal { hostname: string; applied: number; refused: number; error: string | null }

/** error's reason: the nodes that refused the endpoint's latest change (the first named with its error). */
function refusalReason(refusals: Refusal[]): string {
  const [first] = refusals;
  const others = refusals.length > 1 ? ` (and ${refusals.length - 1} more edge node${refusals.length > 2 ? 's' : ''})` : '';
  return `Edge node ${first!.hostname} refused configuration version ${first!.refused}${others}: ${first!.error ?? 'no reason given'}`.slice(0, 2_000);
}

/**
 * Moves endpoints as the online nodes stand with their latest change (its manifest entry's version in the active
 * version), one UPDATE for all: `error`, with the reason, while some online node refused that change and has not
 * applied it since (issue 21 item 8: an endpoint used to read active, or deploying for ever, while a node refused
 * it); else a deploying (or error) endpoint becomes `active` once every online node has applied it (the version that last
 * changed its resource or a response headers policy it uses), or `deploying`
 * while some has not. With no node online nothing moves: nothing has them yet. Then, when no online node is still
 * pending on the active version, its propagation_completed_at is set (once). Returns the number of endpoints moved.
 */
export async function reconcileDeployments(em: EntityManager, source: ConfigSource, now: Date): Promise<{ activated: number; completedVersion: number | null }> {
  const [fleet] = await em.execute<{ n: number; min_applied: string | null; refusals: Refusal[] }[]>(
    `select count(*)::int as n, min(config_version)::text as min_applied,
       coalesce(jsonb_agg(jsonb_build_object('hostname', hostname, 'applied', config_version, 'refused', failed_config_version, 'error', config_error)
         order by hostname, id) filter (where failed_config_version > config_version), '[]') as refusals
     from cdn_edge_node where ${ONLINE}`);
  const refusals = fleet?.refusals ?? [];
  // The endpoints are read before the active version: an endpoint marked deploying by a publish is then judged
  // against that publish's version (or a later one), never against the one before it. Active endpoints are
  // read only when some node's refusal stands (then one of them may be refused).
  const statuses = refusals.length ? `('deploying', 'error', 'active')` : `('deploying', 'error')`;
  // With the response headers policies each uses (its own and its routes'): a policy is a resource of its own.
  const endpoints = fleet && fleet.n > 0 ? await em.execute<{ id: string; status: string; status_reason: string | null; policies: string[] | null }[]>(
    `select e.id, e.status, e.status_reason,
       (select array_agg(distinct u.p::text) from (select e.response_headers_policy_id as p
          union all select r.response_headers_policy_id from cdn_route r where r.distribution_id = e.id) u where u.p is not null) as policies
     from cdn_endpoint e where e.status in ${statuses}`) : [];
  const active = await source.active();
  if (!active) return { activated: 0, completedVersion: null };
  let activated = 0;
  if (fleet && fleet.n > 0) {
    const lowest = Number(fleet.min_applied);
    const moves: { id: string; status: string; reason: string | null }[] = [];
    for (const endpoint of endpoints) {
      const entry = active.manifest.get(`endpoint/${endpoint.id}`);
      if (entry === undefined) continue;
      // The version that last changed what the endpoint serves: its own resource's, or a policy's it uses.
      let version = entry.version;
      for (const policy of endpoint.policies ?? []) version = Math.max(version, active.manifest.get(`response_headers_policy/${policy}`)?.version ?? 0);
      const refusedBy = refusals.filter((r) => r.applied < version && version <= r.refused);
      let status = endpoint.status;
      let reason: string | null = null;
      if (refusedBy.length) {
        status = 'error';
        reason = refusalReason(refusedBy);
      } else if (endpoint.status !== 'active') status = version <= lowest ? 'active' : 'deploying';
      if (status !== endpoint.status || reason !== endpoint.status_reason) moves.push({ id: endpoint.id, status, reason });
    }
    if (moves.length) {
      const moved = await em.execute<{ status: string }[]>(
        `update cdn_endpoint e set status = x.status, status_reason = x.reason, version = e.version + 1, updated_at = ?
         from ${recordset({ id: 'uuid', status: 'text', reason: 'text' })}
         where e.id = x.id and e.status in ${statuses} returning e.status`,
        [now, JSON.stringify(moves)],
      );
      activated = moved.filter((m) => m.status === 'active').length;
    }
  }
  const counts = await propagation(em, active.version);
  let completedVersion: number | null = null;
  if (counts.total_nodes > 0 && counts.pending_nodes === 0) {
    await em.execute(`update cdn_config_version set propagation_completed_at = ? where version_number = ? and propagation_completed_at is null`, [now, active.version]);
    completedVersion = active.version;
  }
  return { activated, completedVersion };
}

/** Marks offline the online or draining nodes not seen since `before` (their heartbeats stopped, or their replica died); returns their ids. */
export async function sweepSilentNodes(em: EntityManager, before: Date, now: Date): Promise<string[]> {
  const rows = await em.execute<{ id: string }[]>(
    `update cdn_edge_node set status = 'offline', offline_at = ?, updated_at = ? where ${ONLINE} and (last_seen_at is null or last_seen_at < ?) returning id`,
    [now, now, before],
  );
  return rows.map((r) => r.id);
}

const WORST_FIRST = `case h.status when 'unhealthy' then 0 when 'degraded' then 1 when 'healthy' then 2 else 3 end`;

/** An origin's health, worst case over the nodes online now (unhealthy > degraded > healthy > unknown); null when none reports it. */
export async function originHealthReading(em: EntityManager, originId: string): Promise<OriginHealthReading | null> {
  const [row] = await em.execute<{
    n: number; status: HealthStatus; latency_ms: number | null; last_success_at: Date | null; last_failure_at: Date | null;
    failure_reason: string | null; consecutive_failures: number | null; checked_at: Date | null;
  }[]>(
    `select count(*)::int as n,
       (array_agg(h.status order by ${WORST_FIRST}))[1] as status,
       max(h.latency_ms) as latency_ms, max(h.last_success_at) as last_success_at, max(h.last_failure_at) as last_failure_at,
       (array_agg(h.failure_reason order by ${WORST_FIRST}, h.checked_at desc nulls last) filter (where h.failure_reason is not null))[1] as failure_reason,
       max(h.consecutive_failures) as consecutive_failures, max(h.checked_at) as checked_at
     from cdn_origin_health h join cdn_edge_node n on n.id = h.node_id and n.${ONLINE}
     where h.origin_id = ?`,
    [originId],
  );
  if (!row || row.n === 0) return null;
  const date = (v: Date | string | null) => (v === null ? null : new Date(v));
  return {
    status: row.status, latency_ms: row.latency_ms, last_success_at: date(row.last_success_at), last_failure_at: date(row.last_failure_at),
    failure_reason: row.failure_reason, consecutive_failures: row.consecutive_failures ?? 0, checked_at: date(row.checked_at),
  };
}

/**
 * Sets cdn_origin.health_status to the current worst case (unknown when no online node reports) for the
 * origins given, only where it differs: the column changes when the health does, not on every probe
 * (it is observed state, not configuration: the origin's version and updated_at stay).
 */
export async function refreshOriginStatus(em: EntityManager, originIds: readonly string[]): Promise<void> {
  if (!originIds.length) return;
  await em.execute(
    `update cdn_origin o set health_status = a.status
     from (
       select o2.id, coalesce((
         select h.status from cdn_origin_health h join cdn_edge_node n on n.id = h.node_id and n.${ONLINE}
         where h.origin_id = o2.id order by ${WORST_FIRST} limit 1
       ), 'unknown') as status
       from cdn_origin o2 where o2.id = any(${idList})
     ) a
     where o.id = a.id and o.health_status is distinct from a.status`,
    [ids(originIds)],
  );
}

/** The origins some of these nodes reported (their aggregate may change when the nodes go offline). */
export async function originsReportedBy(em: EntityManager, nodeIds: readonly string[]): Promise<string[]> {
  if (!nodeIds.length) return [];
  const rows = await em.execute<{ origin_id: string }[]>(`select distinct origin_id from cdn_origin_health where node_id = any(${idList})`, [ids(nodeIds)]);
  return rows.map((r) => r.origin_id);
}
