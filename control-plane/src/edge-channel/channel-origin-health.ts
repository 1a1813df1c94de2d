// Origin health as the agents report it (document 3 "Origin health"; a feed of
// the session layer, channel-feed.ts): each heartbeat carries the node's
// latest probe of each origin it serves, upserted per (origin, node) in
// cdn_origin_health at heartbeat rate (each pair's latest wins within a
// flush), and the origin's health_status follows the worst case over the
// nodes online (nodes-service.ts), also when nodes that reported it go
// offline.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Heartbeat } from '../../../shared/gen/edge/v1/control_pb.ts';
import { HEALTH_STATUSES, type HealthStatus, type OriginHealthReading } from '../cdn/index.ts';
import { executeBound, recordset } from '../db/bulk.ts';
import { UUID, agentText, msDate, type ChannelContext, type Feed } from './channel-feed.ts';
import type { AgentStream } from './channel-stream.ts';
import { LatestPerNode } from './channel-latest.ts';
import { originsReportedBy, refreshOriginStatus } from './nodes-service.ts';

/** At most this many origin probes are taken from one heartbeat. */
const MAX_PROBES_PER_HEARTBEAT = 1_000;
const INT_MAX = 2_147_483_647;

/** One node's latest probe of one origin. */
export interface OriginProbe extends OriginHealthReading {
  origin_id: string;
  node_id: string;
}

/** Writes the probes taken; the origins the nodes gone offline reported are re-aggregated. */
async function writeOriginProbes(em: EntityManager, probes: readonly OriginProbe[], offline: readonly string[]): Promise<void> {
  if (probes.length) await writeProbes(em, probes);
  if (offline.length) await refreshOriginStatus(em, await originsReportedBy(em, offline));
}

/** Upserts the probes (unknown origins and nodes skipped) and refreshes the status of the origins they touched. */
async function writeProbes(em: EntityManager, probes: readonly OriginProbe[]): Promise<void> {
  const rows = await executeBound<{ origin_id: string }>(em,
    `insert into cdn_origin_health (origin_id, node_id, status, latency_ms, last_success_at, last_failure_at, failure_reason, consecutive_failures, checked_at)
     select x.origin_id, x.node_id, x.status, x.latency_ms, x.last_success_at, x.last_failure_at, x.failure_reason, x.consecutive_failures, x.checked_at
     from ${recordset({
       origin_id: 'uuid', node_id: 'uuid', status: 'text', latency_ms: 'int', last_success_at: 'timestamptz', last_failure_at: 'timestamptz',
       failure_reason: 'text', consecutive_failures: 'int', checked_at: 'timestamptz',
     }, 'x', '$1')}
     join cdn_origin o on o.id = x.origin_id
     join cdn_edge_node n on n.id = x.node_id
     on conflict (origin_id, node_id) do update set status = excluded.status, latency_ms = excluded.latency_ms,
       last_success_at = excluded.last_success_at, last_failure_at = excluded.last_failure_at, failure_reason = excluded.failure_reason,
       consecutive_failures = excluded.consecutive_failures, checked_at = excluded.checked_at
     returning origin_id`,
    [JSON.stringify(probes)],
  );
  await refreshOriginStatus(em, [...new Set(rows.map((r) => r.origin_id))]);
}

export class OriginHealthFeed implements Feed<undefined> {
  readonly name = 'origin health';
  readonly #context: ChannelContext;
  readonly #probes: LatestPerNode<OriginProbe>;

  constructor(context: ChannelContext) {
    this.#context = context;
    this.#probes = new LatestPerNode(context.writer, (p) => `${p.origin_id}|${p.node_id}`, writeOriginProbes);
  }

  attach(): undefined {
    return undefined;
  }

  onHeartbeat(stream: AgentStream, _state: undefined, heartbeat: Heartbeat): void {
    if (!heartbeat.origins.length) return;
    const now = this.#context.clock.now();
    for (const probe of heartbeat.origins.slice(0, MAX_PROBES_PER_HEARTBEAT)) {
      if (!UUID.test(probe.originId)) continue;
      this.#probes.add({
        origin_id: probe.originId.toLowerCase(),
        node_id: stream.nodeId,
        status: (HEALTH_STATUSES as readonly string[]).includes(probe.status) ? probe.status as HealthStatus : 'unknown',
        latency_ms: Math.min(probe.latencyMs, INT_MAX),
        last_success_at: msDate(probe.lastSuccessAtMs),
        last_failure_at: msDate(probe.lastFailureAtMs),
        failure_reason: agentText(probe.failureReason, 500) || null,
        consecutive_failures: Math.min(probe.consecutiveFailures, INT_MAX),
        checked_at: msDate(probe.checkedAtMs) ?? now,
      });
    }
  }
}
