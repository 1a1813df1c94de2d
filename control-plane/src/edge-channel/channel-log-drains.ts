// Log drain delivery as the agents report it (issue 24 item 2; a feed of the
// session layer, channel-feed.ts): each heartbeat carries the node's state of
// every drain it ships (status, last error, records shipped and dropped). A
// node's state of a drain is upserted in cdn_log_drain_node when it changes
// (status, error, drops), and at most once a minute otherwise; then each
// drain touched is refreshed from its nodes: `error` with the latest error of
// an online node that fails to deliver (named), `active` once none does, and
// records_dropped summed over its nodes. A paused drain keeps its status and
// last_error (pause is the administrator's word). Nodes going offline refresh
// the drains they reported.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Heartbeat } from '../../../shared/gen/edge/v1/control_pb.ts';
import { executeBound, recordset } from '../db/bulk.ts';
import { UUID, agentText, msDate, safeNumber, type ChannelContext, type Feed } from './channel-feed.ts';
import type { AgentStream } from './channel-stream.ts';
import { LatestPerNode } from './channel-latest.ts';
import { ONLINE } from './nodes-service.ts';

/** At most this many drain states are taken from one heartbeat. */
const MAX_DRAINS_PER_HEARTBEAT = 1_000;
/** A state that did not change is written again after this long (its counters move). */
const REWRITE_MS = 60_000;
const STATUSES = new Set(['active', 'error', 'paused']);

export interface DrainNodeState {
  drain_id: string;
  node_id: string;
  status: string;
  last_error: string | null;
  records_shipped: number;
  records_dropped: number;
  batches_sent: number;
  buffered_bytes: number;
  last_delivered_at: Date | null;
  reported_at: Date;
}

/** Writes the states taken and refreshes the drains they touched and those the nodes gone offline reported. */
async function writeDrainStates(em: EntityManager, states: readonly DrainNodeState[], offline: readonly string[], now: Date): Promise<void> {
  const drains = new Set<string>();
  if (states.length) for (const id of await writeStates(em, states)) drains.add(id);
  if (offline.length) {
    const rows = await em.execute<{ drain_id: string }[]>(`select distinct drain_id from cdn_log_drain_node where node_id in (select value::uuid from jsonb_array_elements_text(?::jsonb))`, [JSON.stringify(offline)]);
    for (const r of rows) drains.add(r.drain_id);
  }
  if (drains.size) await refreshDrains(em, [...drains], now);
}

/** Upserts the states (drains and nodes that do not exist are skipped); returns the drains touched. */
async function writeStates(em: EntityManager, states: readonly DrainNodeState[]): Promise<string[]> {
  const rows = await executeBound<{ drain_id: string }>(em,
    `insert into cdn_log_drain_node (drain_id, node_id, status, last_error, records_shipped, records_dropped, batches_sent, buffered_bytes, last_delivered_at, reported_at)
     select x.drain_id, x.node_id, x.status, x.last_error, x.records_shipped, x.records_dropped, x.batches_sent, x.buffered_bytes, x.last_delivered_at, x.reported_at
     from ${recordset({
       drain_id: 'uuid', node_id: 'uuid', status: 'text', last_error: 'text', records_shipped: 'bigint', records_dropped: 'bigint', batches_sent: 'bigint',
       buffered_bytes: 'bigint', last_delivered_at: 'timestamptz', reported_at: 'timestamptz',
     }, 'x', '$1')}
     join cdn_log_drain d on d.id = x.drain_id
     join cdn_edge_node n on n.id = x.node_id
     on conflict (drain_id, node_id) do update set status = excluded.status, last_error = excluded.last_error, records_shipped = excluded.records_shipped,
       records_dropped = excluded.records_dropped, batches_sent = excluded.batches_sent, buffered_bytes = excluded.buffered_bytes,
       last_delivered_at = excluded.last_delivered_at, reported_at = excluded.reported_at
     returning drain_id`,
    [JSON.stringify(states)],
  );
  return [...new Set(rows.map((r) => r.drain_id))];
}

/**
 * A drain's status and last_error from its nodes: `error` (the latest error of an online node that fails, with
 * its hostname) or `active`; records_dropped summed over every node that reported it. Paused drains keep their
 * status and last_error. Only drains whose values change are written (their version moves).
 */
export async function refreshDrains(em: EntityManager, drainIds: readonly string[], now: Date): Promise<void> {
  await em.execute(
    `update cdn_log_drain d set
       status = case when d.status = 'paused' then d.status else x.status end,
       last_error = case when d.status = 'paused' then d.last_error else x.last_error end,
       records_dropped = x.dropped, updated_at = ?, version = d.version + 1
     from (
       select d.id,
         case when e.last_error is null then 'active' else 'error' end as status,
         e.last_error,
         coalesce((select sum(s.records_dropped) from cdn_log_drain_node s where s.drain_id = d.id), 0)::bigint as dropped
       from cdn_log_drain d
       left join lateral (
         select left('Edge node ' || n.hostname || ': ' || coalesce(s.last_error, 'delivery failing'), 1000) as last_error
         from cdn_log_drain_node s join cdn_edge_node n on n.id = s.node_id
         where s.drain_id = d.id and s.status = 'error' and n.${ONLINE}
         order by s.reported_at desc, n.hostname limit 1
       ) e on true
       where d.id in (select value::uuid from jsonb_array_elements_text(?::jsonb))
     ) x
     where d.id = x.id and (
       d.records_dropped is distinct from x.dropped
       or (d.status <> 'paused' and (d.status is distinct from x.status or d.last_error is distinct from x.last_error)))`,
    [now, JSON.stringify(drainIds)],
  );
}

export class LogDrainFeed implements Feed<Map<string, { signature: string; at: number }>> {
  readonly name = 'log drain delivery';
  readonly #context: ChannelContext;
  readonly #states: LatestPerNode<DrainNodeState>;

  constructor(context: ChannelContext) {
    this.#context = context;
    this.#states = new LatestPerNode(context.writer, (s) => `${s.drain_id}|${s.node_id}`, writeDrainStates);
  }

  /** Per stream: what was last written of each drain's state (its signature and when). */
  attach(): Map<string, { signature: string; at: number }> {
    return new Map();
  }

  onHeartbeat(stream: AgentStream, written: Map<string, { signature: string; at: number }>, heartbeat: Heartbeat): void {
    if (!heartbeat.logDrains.length) return;
    const now = this.#context.clock.now();
    for (const d of heartbeat.logDrains.slice(0, MAX_DRAINS_PER_HEARTBEAT)) {
      if (!UUID.test(d.drainId)) continue;
      const drainId = d.drainId.toLowerCase();
      const status = STATUSES.has(d.status) ? d.status : 'error';
      const lastError = agentText(d.lastError, 1000) || null;
      const dropped = safeNumber(d.recordsDropped) ?? Number.MAX_SAFE_INTEGER;
      const signature = `${status}|${lastError ?? ''}|${dropped}`;
      const before = written.get(drainId);
      if (before && before.signature === signature && now.getTime() - before.at < REWRITE_MS) continue;
      written.set(drainId, { signature, at: now.getTime() });
      this.#states.add({
        drain_id: drainId, node_id: stream.nodeId, status, last_error: lastError,
        records_shipped: safeNumber(d.recordsShipped) ?? Number.MAX_SAFE_INTEGER, records_dropped: dropped,
        batches_sent: safeNumber(d.batchesSent) ?? Number.MAX_SAFE_INTEGER, buffered_bytes: safeNumber(d.bufferedBytes) ?? Number.MAX_SAFE_INTEGER,
        last_delivered_at: msDate(d.lastDeliveredAtMs), reported_at: now,
      });
    }
  }
}
