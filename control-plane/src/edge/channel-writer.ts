// The control channel's writes to PostgreSQL, coalesced: acknowledgements,
// heartbeats and origin probes are buffered in memory and written in a few
// set-based statements per flush, whatever the number of agents (issue 12:
// purge to 1,000 agents all acked under 150 ms). The acks of a purge this
// replica just fanned out are awaited by count (the hub says how many streams
// it wrote it to): they are flushed the moment the last one arrives, or 50
// milliseconds after the first if some never come. Other acks (a catch-up,
// a prefetch) are flushed once they pause for 5 milliseconds, within the same
// 50. A flush in progress collects the next batch meanwhile;
// heartbeats and origin probes wait up to a second and ride with no earlier
// flush (each is a round trip of its own; each node's latest overwrites its
// earlier ones, so a node costs at most one row per flush). Changes that move
// a node (offline, a configuration applied or refused) are flushed like acks.
// Every node change is keyed by the stream it came from and
// applies only while the node's row still belongs to that stream (same
// connected_at and replica): a node that reconnected meanwhile is left alone.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { OriginHealthReading } from '../cdn/services.ts';
import type { Clock } from '../core/clock.ts';
import { executeBound, recordset } from '../db/bulk.ts';
import { evaluatePrefetchJobs, openJobsOf, recordPrefetchAnswers, type PrefetchAnswer } from './channel-prefetch.ts';
import { evaluatePurges, recordPurgeAcks, type PurgeAckRow } from './channel-purges.ts';
import type { AgentStream } from './channel-stream.ts';
import type { EdgeNodeStatus } from './nodes-entity.ts';
import { originsReportedBy, refreshOriginStatus } from './nodes-service.ts';

/** Acknowledgements nobody counts on are written once none has arrived for this long... */
export const ACK_FLUSH_DELAY_MS = 5;
/** ...and every acknowledgement at most this long after the first one buffered (awaited ones at once when the last arrives). */
export const ACK_MAX_DELAY_MS = 50;
/** Purges whose acks are awaited by count, at most (the oldest are forgotten: their acks then wait for a pause). */
const AWAITED_PURGES = 1_000;
/** Delay before heartbeats and origin probes are written. */
export const HEARTBEAT_FLUSH_DELAY_MS = 1_000;

export interface NodeChange {
  id: string;
  connected_at: Date;
  last_seen_at?: Date | null;
  status?: EdgeNodeStatus | null;
  config_version?: number | null;
  failed_config_version?: number | null;
  config_error?: string | null;
  clear_error?: boolean;
  purge_sequence?: number | null;
  cache_objects?: number | null;
  cache_bytes?: number | null;
}

/** One node's latest probe of one origin. */
export interface OriginProbe extends OriginHealthReading {
  origin_id: string;
  node_id: string;
}

export interface FlushHooks {
  /** After a flush that recorded configuration acks or changed which nodes are online. */
  configOrFleetChanged(em: EntityManager): Promise<void>;
}

export class ChannelWriter {
  readonly #em: () => EntityManager;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #replicaId: string;
  readonly #hooks: FlushHooks;
  readonly #ackDelayMs: number;
  readonly #ackMaxDelayMs: number;

  #nodes = new Map<string, NodeChange>();
  /** The highest purge sequence each stream's node applied since the last node write (purgeApplied). */
  #purgesApplied = new Map<AgentStream, number>();
  /** Purge acks by purge, then node. */
  #purgeAcks = new Map<string, Map<string, PurgeAckRow>>();
  /** Acks still to come of purges this replica just fanned out, by purge id (expectAcks). */
  readonly #awaited = new Map<string, number>();
  /** Every ack of an awaited purge has arrived: flush now. */
  #ackComplete = false;
  #prefetch = new Map<string, PrefetchAnswer>();
  #probes = new Map<string, OriginProbe>();
  #offlineNodes = new Set<string>();
  #configChanged = false;
  #fleetChanged = false;

  /** When what is buffered must be written (ms since the epoch): acks (first and latest), urgent changes, heartbeats and probes. */
  #ackFirst = Infinity;
  #ackLast = -Infinity;
  #urgentDue = Infinity;
  #routineDue = Infinity;
  /** A node change that must not wait for the heartbeat flush is buffered. */
  #urgentNodes = false;
  #timer: NodeJS.Timeout | null = null;
  #timerDue = Infinity;
  #flushing: Promise<void> | null = null;
  #closed = false;

  constructor(options: { em: () => EntityManager; clock: Clock; log: Logger; replicaId: string; hooks: FlushHooks; ackDelayMs?: number; ackMaxDelayMs?: number }) {
    this.#em = options.em;
    this.#clock = options.clock;
    this.#log = options.log;
    this.#replicaId = options.replicaId;
    this.#hooks = options.hooks;
    this.#ackDelayMs = options.ackDelayMs ?? ACK_FLUSH_DELAY_MS;
    this.#ackMaxDelayMs = options.ackMaxDelayMs ?? ACK_MAX_DELAY_MS;
  }

  /** Merges a change of the node behind `stream` into the next flush (later values win; purge sequences and refused versions only grow). */
  node(stream: AgentStream, change: Omit<NodeChange, 'id' | 'connected_at'>, urgent: boolean): void {
    this.#merge(stream, change);
    if (urgent) {
      this.#urgentNodes = true;
      this.#urgent();
    } else this.#routine();
  }

  #merge(stream: AgentStream, change: Omit<NodeChange, 'id' | 'connected_at'>): void {
    const key = nodeKey(stream.nodeId, stream.connectedAt);
    const current = this.#nodes.get(key) ?? { id: stream.nodeId, connected_at: stream.connectedAt };
    const grow = (a: number | null | undefined, b: number | null | undefined) => (b == null ? a : a == null ? b : Math.max(a, b));
    const next: NodeChange = { ...current, ...withoutUndefined(change) };
    next.failed_config_version = grow(current.failed_config_version, change.failed_config_version);
    next.purge_sequence = grow(current.purge_sequence, change.purge_sequence);
    if (change.clear_error) next.config_error = null;
    if (change.config_error) next.clear_error = false;
    if (change.config_version != null || change.failed_config_version != null) this.#configChanged = true;
    if (change.status === 'offline') {
      this.#offlineNodes.add(stream.nodeId);
      this.#fleetChanged = true;
    }
    this.#nodes.set(key, next);
  }

  /**
   * The node behind `stream` applied the purge numbered `sequence`: its purge_sequence moves with the next
   * heartbeat-rate write (at most one row per node per flush, however many purges it acked meanwhile).
   */
  purgeApplied(stream: AgentStream, sequence: number): void {
    // Called for every ack (a thousand per purge): kept by stream, and folded into the node changes when they are written.
    const current = this.#purgesApplied.get(stream);
    if (current === undefined || current < sequence) this.#purgesApplied.set(stream, sequence);
    this.#routine();
  }

  #foldPurgesApplied(): void {
    for (const [stream, sequence] of this.#purgesApplied) this.#merge(stream, { purge_sequence: sequence });
    this.#purgesApplied = new Map();
  }

  /** The hub wrote purge `purgeId` to `streams` streams: its acks are flushed as soon as that many have arrived. */
  expectAcks(purgeId: string, streams: number): void {
    if (streams <= 0) return;
    if (this.#awaited.size >= AWAITED_PURGES) this.#awaited.delete(this.#awaited.keys().next().value!);
    this.#awaited.set(purgeId, streams);
  }

  purgeAck(ack: PurgeAckRow): void {
    this.#bufferAck(ack, true);
    const left = this.#awaited.get(ack.purge_id);
    if (left !== undefined) {
      if (left > 1) this.#awaited.set(ack.purge_id, left - 1);
      else {
        this.#awaited.delete(ack.purge_id);
        this.#ackComplete = true;
      }
    }
    this.#acked();
  }

  /** Buffers a purge ack under its purge and node; `replace` false keeps an ack of the same node buffered since (a failed flush's put-back). */
  #bufferAck(ack: PurgeAckRow, replace: boolean): void {
    let byNode = this.#purgeAcks.get(ack.purge_id);
    if (!byNode) this.#purgeAcks.set(ack.purge_id, (byNode = new Map()));
    if (replace || !byNode.has(ack.node_id)) byNode.set(ack.node_id, ack);
  }

  prefetchAnswer(answer: PrefetchAnswer): void {
    this.#prefetch.set(`${answer.job_id}|${answer.node_id}`, answer);
    this.#acked();
  }

  originProbe(probe: OriginProbe): void {
    this.#probes.set(`${probe.origin_id}|${probe.node_id}`, probe);
    this.#routine();
  }

  /** Nodes went offline outside a stream (the sweeper): re-evaluate what counted them. */
  nodesWentOffline(nodeIds: readonly string[]): void {
    if (!nodeIds.length) return;
    for (const id of nodeIds) this.#offlineNodes.add(id);
    this.#fleetChanged = true;
    this.#urgent();
  }

  /** Nodes came online (Hello): deployments and propagation are re-evaluated. */
  fleetChanged(): void {
    this.#fleetChanged = true;
    this.#urgent();
  }

  #acked(): void {
    const now = Date.now();
    if (this.#ackFirst === Infinity) this.#ackFirst = now;
    this.#ackLast = now;
    this.#arm();
  }

  #urgent(): void {
    this.#urgentDue = Math.min(this.#urgentDue, Date.now() + this.#ackDelayMs);
    this.#arm();
  }

  #routine(): void {
    if (this.#routineDue === Infinity) this.#routineDue = Date.now() + HEARTBEAT_FLUSH_DELAY_MS;
    this.#arm();
  }

  /**
   * When the next flush is due: the earliest of what is buffered. Acks: at once when an awaited purge has all of
   * its acks; while one buffered is still awaited, ACK_MAX_DELAY_MS after the first; otherwise once they pause.
   */
  #due(): number {
    let acks = Infinity;
    if (this.#ackComplete) acks = Date.now();
    else if (this.#ackFirst !== Infinity) {
      acks = this.#ackFirst + this.#ackMaxDelayMs;
      if (!this.#awaitingBuffered()) acks = Math.min(acks, this.#ackLast + this.#ackDelayMs);
    }
    return Math.min(acks, this.#urgentDue, this.#routineDue);
  }

  /** Nothing urgent is due any more: a flush takes what was buffered, or nothing was (acks and urgent changes). */
  #clearDue(): void {
    this.#ackFirst = this.#urgentDue = Infinity;
    this.#ackLast = -Infinity;
    this.#ackComplete = false;
  }

  /** Whether acks of a buffered purge are still to come (its flush waits for them rather than for a pause). */
  #awaitingBuffered(): boolean {
    if (!this.#awaited.size) return false;
    for (const purgeId of this.#purgeAcks.keys()) if (this.#awaited.has(purgeId)) return true;
    return false;
  }

  /**
   * Sets the timer for the next flush. A timer already set for no later is kept: acks arriving one after another
   * only move the due time on, and the timer, when it fires, sets itself again for the new time (no timer per ack).
   */
  #arm(): void {
    if (this.#closed) return;
    const due = this.#due();
    if (due === Infinity || (this.#timer && this.#timerDue <= due)) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timerDue = due;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#timerDue = Infinity;
      if (this.#due() > Date.now()) this.#arm();
      else void this.#flush(false);
    }, Math.max(0, due - Date.now()));
  }

  /** Writes everything buffered; one flush at a time (a call during a flush waits for it, then flushes what came meanwhile). */
  flush(): Promise<void> {
    return this.#flush(true);
  }

  /** `everything`: heartbeats and probes too, even before they are due (a timer's flush leaves them to their own). */
  async #flush(everything: boolean): Promise<void> {
    while (this.#flushing) await this.#flushing;
    const routine = everything || this.#routineDue <= Date.now();
    const urgent = this.#purgeAcks.size > 0 || this.#prefetch.size > 0 || this.#urgentNodes || this.#fleetChanged || this.#configChanged;
    if (!urgent) {
      this.#clearDue();
      if (!(routine && (this.#nodes.size > 0 || this.#probes.size > 0 || this.#purgesApplied.size > 0))) return this.#arm();
    }
    this.#flushing = this.#flushOnce(routine).catch((error: unknown) => {
      this.#log.error({ err: error }, 'edge channel: writing acknowledgements and heartbeats failed; retrying');
      this.#urgentDue = Math.min(this.#urgentDue, Date.now() + HEARTBEAT_FLUSH_DELAY_MS);
    }).finally(() => {
      this.#flushing = null;
      this.#arm();
    });
    await this.#flushing;
  }

  async #flushOnce(routine: boolean): Promise<void> {
    const writeNodes = routine || this.#urgentNodes || this.#configChanged;
    if (writeNodes) this.#foldPurgesApplied();
    const nodes = writeNodes ? [...this.#nodes.values()] : [];
    const purgeAcks = [...this.#purgeAcks.values()].flatMap((byNode) => [...byNode.values()]);
    const prefetch = [...this.#prefetch.values()];
    const probes = routine ? [...this.#probes.values()] : [];
    const offline = [...this.#offlineNodes];
    const configChanged = this.#configChanged;
    const fleetChanged = this.#fleetChanged;
    if (writeNodes) {
      this.#nodes = new Map();
      this.#urgentNodes = false;
    }
    if (routine) {
      this.#probes = new Map();
      this.#routineDue = Infinity;
    }
    this.#purgeAcks = new Map();
    this.#prefetch = new Map();
    this.#offlineNodes = new Set();
    this.#configChanged = this.#fleetChanged = false;
    this.#clearDue();
    const em = this.#em();
    const now = this.#clock.now();
    try {
      if (nodes.length) await this.#writeNodes(em, nodes, now);
      if (purgeAcks.length) await recordPurgeAcks(em, purgeAcks, now);
      if (prefetch.length) await evaluatePrefetchJobs(em, await recordPrefetchAnswers(em, prefetch), now);
      if (probes.length) await this.#writeProbes(em, probes);
      if (fleetChanged) {
        await evaluatePurges(em, 'open', now);
        if (offline.length) {
          await evaluatePrefetchJobs(em, await openJobsOf(em, offline), now);
          await refreshOriginStatus(em, await originsReportedBy(em, offline));
        }
      }
      if (configChanged || fleetChanged) await this.#hooks.configOrFleetChanged(em);
    } catch (error) {
      // Put back what was not written (newer buffered values win) so the retry writes it.
      for (const n of nodes) {
        const key = nodeKey(n.id, n.connected_at);
        if (!this.#nodes.has(key)) this.#nodes.set(key, n);
      }
      if (nodes.length) this.#urgentNodes = true;
      for (const a of purgeAcks) this.#bufferAck(a, false);
      for (const a of prefetch) if (!this.#prefetch.has(`${a.job_id}|${a.node_id}`)) this.#prefetch.set(`${a.job_id}|${a.node_id}`, a);
      for (const p of probes) if (!this.#probes.has(`${p.origin_id}|${p.node_id}`)) this.#probes.set(`${p.origin_id}|${p.node_id}`, p);
      if (probes.length) this.#routineDue = Math.min(this.#routineDue, Date.now() + HEARTBEAT_FLUSH_DELAY_MS);
      for (const id of offline) this.#offlineNodes.add(id);
      this.#configChanged ||= configChanged;
      this.#fleetChanged ||= fleetChanged;
      throw error;
    }
  }

  async #writeNodes(em: EntityManager, nodes: NodeChange[], now: Date): Promise<void> {
    await executeBound(em,
      `update cdn_edge_node n set
         last_seen_at = coalesce(x.last_seen_at, n.last_seen_at),
         status = coalesce(x.status, n.status),
         config_version = coalesce(x.config_version, n.config_version),
         failed_config_version = greatest(n.failed_config_version, x.failed_config_version),
         config_error = case when x.clear_error then null when x.config_error is not null then x.config_error else n.config_error end,
         purge_sequence = greatest(n.purge_sequence, x.purge_sequence),
         cache_objects = coalesce(x.cache_objects, n.cache_objects),
         cache_bytes = coalesce(x.cache_bytes, n.cache_bytes),
         updated_at = $1
       from ${recordset({
         id: 'uuid', connected_at: 'timestamptz', last_seen_at: 'timestamptz', status: 'text', config_version: 'bigint', failed_config_version: 'bigint',
         config_error: 'text', clear_error: 'boolean', purge_sequence: 'bigint', cache_objects: 'bigint', cache_bytes: 'bigint',
       }, 'x', '$2')}
       where n.id = x.id and n.connected_at = x.connected_at and n.replica_id = $3`,
      [now, JSON.stringify(nodes), this.#replicaId],
    );
  }

  async #writeProbes(em: EntityManager, probes: OriginProbe[]): Promise<void> {
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

  /** Writes what is buffered and stops scheduling (shutdown). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.flush();
  }
}

/** A node's changes are kept per stream of it: the node id and the stream's connection time. */
function nodeKey(id: string, connectedAt: Date): string {
  return `${id}@${connectedAt.getTime()}`;
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
