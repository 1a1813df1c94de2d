// The control channel's writes to PostgreSQL, coalesced: the session layer's
// node rows (heartbeats, a node going offline, what a feed records on a node)
// and the feeds' own buffers (WriterPart: purge acks, prefetch answers,
// origin probes, deployments to reconcile), written in a few set-based
// statements per flush whatever the number of agents (issue 12: purge to
// 1,000 agents all acked under 150 ms). Acks a feed awaits by count (the
// purge feed says how many streams it wrote a purge to) are flushed the
// moment the last one arrives, or 50 milliseconds after the first if some
// never come. Other acks are flushed once they pause for 5 milliseconds,
// within the same 50. A flush in progress collects the next batch meanwhile;
// heartbeat-rate writes (node rows, origin probes) wait up to a second and
// ride with no earlier flush (each is a round trip of its own; each node's
// latest overwrites its earlier ones, so a node costs at most one row per
// flush). Changes that move a node (offline, a configuration applied or
// refused) are flushed like acks. Every node change is keyed by the stream it
// came from and applies only while the node's row still belongs to that
// stream (same connected_at and replica): a node that reconnected meanwhile
// is left alone. The node row's columns are declared by whoever owns them
// (the session layer its own, each feed its own: addNodeColumns).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Clock } from '../core/clock.ts';
import { executeBound, recordset } from '../db/bulk.ts';

/** Acknowledgements nobody counts on are written once none has arrived for this long... */
export const ACK_FLUSH_DELAY_MS = 5;
/** ...and every acknowledgement at most this long after the first one buffered (awaited ones at once when the last arrives). */
export const ACK_MAX_DELAY_MS = 50;
/** Delay before heartbeat-rate writes (node rows, origin probes). */
export const HEARTBEAT_FLUSH_DELAY_MS = 1_000;

/**
 * How a node column is merged in the buffer and written: `latest` (the last value given; null leaves the
 * column as it is), `max` (only grows), `nullable` (the last value given, null included: it clears the column).
 */
export interface NodeColumn {
  type: 'bigint' | 'text' | 'timestamptz' | 'jsonb';
  merge: 'latest' | 'max' | 'nullable';
  /** With `max`: the column (a bigint) whose value reaching this one clears it, as it is written. */
  clearedBy?: string;
}

/** Column → value; an absent (undefined) column is left as it is. */
export type NodeChange = Readonly<Record<string, unknown>>;

/** The stream a node change comes from: the node and the stream's connection time. */
export interface NodeStream {
  readonly nodeId: string;
  readonly connectedAt: Date;
}

/** The session layer's own columns. */
const SESSION_COLUMNS: Readonly<Record<string, NodeColumn>> = {
  last_seen_at: { type: 'timestamptz', merge: 'latest' },
  status: { type: 'text', merge: 'latest' },
  offline_at: { type: 'timestamptz', merge: 'latest' },
  cache_objects: { type: 'bigint', merge: 'latest' },
  cache_bytes: { type: 'bigint', merge: 'latest' },
};

/** What changed in the fleet since the last flush, for the parts that react to it. */
export interface FleetChange {
  /** Nodes came online or went offline. */
  readonly changed: boolean;
  /** The nodes that went offline. */
  readonly offline: readonly string[];
}

/** A feed's buffered writes, flushed with the channel's (ChannelWriter.add). */
export interface WriterPart {
  /** Something is buffered that does not wait for the heartbeat-rate flush (acks, answers, a state to reconcile). */
  readonly urgent: boolean;
  /** Something is buffered at heartbeat rate. */
  readonly routine: boolean;
  /** Acks buffered here are still awaited by count: the flush waits for them (within ACK_MAX_DELAY_MS) rather than for a pause. */
  awaiting?(): boolean;
  /** Just before node rows are written: merges values it kept per stream into them. */
  foldNodes?(merge: (stream: NodeStream, change: NodeChange) => void): void;
  /** What this flush writes (`routine`: the heartbeat-rate buffers too, `fleet`: to react to), or null for nothing. */
  take(routine: boolean, fleet: FleetChange): PartBatch | null;
}

export interface PartBatch {
  /** Writes it, after the node rows. */
  write(em: EntityManager, now: Date): Promise<void>;
  /** The flush failed: buffers again what was taken (values buffered since win). */
  putBack(): void;
}

export interface ChannelWriterOptions {
  em: () => EntityManager;
  clock: Clock;
  log: Logger;
  replicaId: string;
  ackDelayMs?: number;
  ackMaxDelayMs?: number;
}

export class ChannelWriter {
  readonly #em: () => EntityManager;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #replicaId: string;
  readonly #ackDelayMs: number;
  readonly #ackMaxDelayMs: number;
  readonly #columns: Record<string, NodeColumn> = { ...SESSION_COLUMNS };
  #nodeStatement: string | null = null;
  readonly #parts: WriterPart[] = [];

  #nodes = new Map<string, Record<string, unknown>>();
  #offlineNodes = new Set<string>();
  #fleetChanged = false;

  /** When what is buffered must be written (ms since the epoch): acks (first and latest), urgent changes, heartbeat-rate writes. */
  #ackFirst = Infinity;
  #ackLast = -Infinity;
  /** Every ack a part awaited has arrived: flush now. */
  #ackComplete = false;
  #urgentDue = Infinity;
  #routineDue = Infinity;
  /** A node change that must not wait for the heartbeat-rate flush is buffered. */
  #urgentNodes = false;
  #timer: NodeJS.Timeout | null = null;
  #timerDue = Infinity;
  #flushing: Promise<void> | null = null;
  /** The entity manager flushes write with (#flushOnce). */
  #flushEm: EntityManager | null = null;
  #closed = false;

  constructor(options: ChannelWriterOptions) {
    this.#em = options.em;
    this.#clock = options.clock;
    this.#log = options.log;
    this.#replicaId = options.replicaId;
    this.#ackDelayMs = options.ackDelayMs ?? ACK_FLUSH_DELAY_MS;
    this.#ackMaxDelayMs = options.ackMaxDelayMs ?? ACK_MAX_DELAY_MS;
  }

  /** Adds a feed's buffer; its batches are written after the node rows, in the order parts were added. */
  add<P extends WriterPart>(part: P): P {
    this.#parts.push(part);
    return part;
  }

  /** Declares node columns a feed owns (before it writes them). */
  addNodeColumns(columns: Readonly<Record<string, NodeColumn>>): void {
    for (const [name, column] of Object.entries(columns)) {
      if (!/^[a-z_]+$/.test(name) || (column.clearedBy !== undefined && !/^[a-z_]+$/.test(column.clearedBy))) throw new Error(`node column ${name}: not a column name`);
      const known = this.#columns[name];
      if (known && (known.type !== column.type || known.merge !== column.merge || known.clearedBy !== column.clearedBy)) throw new Error(`node column ${name} declared twice, differently`);
      this.#columns[name] = column;
    }
    this.#nodeStatement = null;
  }

  /** Merges a change of the node behind `stream` into the next flush (`urgent`: with the next acks rather than at heartbeat rate). */
  node(stream: NodeStream, change: NodeChange, urgent: boolean): void {
    this.#merge(stream, change);
    if (urgent) {
      this.#urgentNodes = true;
      this.soon();
    } else this.later();
  }

  #merge(stream: NodeStream, change: NodeChange): void {
    const key = nodeKey(stream.nodeId, stream.connectedAt);
    let next = this.#nodes.get(key);
    if (!next) this.#nodes.set(key, (next = { id: stream.nodeId, connected_at: stream.connectedAt }));
    for (const name in change) {
      const value = change[name];
      if (value === undefined) continue;
      const column = this.#columns[name];
      if (!column) throw new Error(`node column ${name} is not declared`);
      if (column.merge === 'max') {
        const current = next[name] as number | null | undefined;
        if (value !== null && (current == null || (value as number) > current)) next[name] = value;
      } else {
        next[name] = value;
        if (column.merge === 'nullable') next[`set_${name}`] = true;
      }
    }
    if (change.status === 'offline') {
      this.#offlineNodes.add(stream.nodeId);
      this.#fleetChanged = true;
    }
  }

  /** Nodes went offline outside a stream (the sweeper): the parts react to it. */
  nodesWentOffline(nodeIds: readonly string[]): void {
    if (!nodeIds.length) return;
    for (const id of nodeIds) this.#offlineNodes.add(id);
    this.#fleetChanged = true;
    this.soon();
  }

  /** Nodes came online (Hello): the parts react to it. */
  fleetChanged(): void {
    this.#fleetChanged = true;
    this.soon();
  }

  /** A part buffered an acknowledgement. */
  acked(): void {
    const now = Date.now();
    const first = this.#ackFirst === Infinity;
    if (first) this.#ackFirst = now;
    this.#ackLast = now;
    // Called for every ack: a later ack only moves the due time on (the timer, already set for no later, stays),
    // unless it is the first or the last one a part awaited.
    if (first || this.#ackComplete || !this.#timer) this.#arm();
  }

  /** A part has every acknowledgement it awaited: flush now. */
  acksComplete(): void {
    this.#ackComplete = true;
  }

  /** Something must be written with the next acks (within the ack delay). */
  soon(): void {
    this.#urgentDue = Math.min(this.#urgentDue, Date.now() + this.#ackDelayMs);
    this.#arm();
  }

  /** Something may wait for the heartbeat-rate flush. */
  later(): void {
    // Already due: the timer (or the flush under way, which sets it again) covers it.
    if (this.#routineDue !== Infinity) return;
    this.#routineDue = Date.now() + HEARTBEAT_FLUSH_DELAY_MS;
    this.#arm();
  }

  /**
   * When the next flush is due: the earliest of what is buffered. Acks: at once when a part has all it awaited;
   * while one buffered is still awaited, ACK_MAX_DELAY_MS after the first; otherwise once they pause.
   */
  #due(): number {
    let acks = Infinity;
    if (this.#ackComplete) acks = Date.now();
    else if (this.#ackFirst !== Infinity) {
      acks = this.#ackFirst + this.#ackMaxDelayMs;
      if (!this.#awaiting()) acks = Math.min(acks, this.#ackLast + this.#ackDelayMs);
    }
    return Math.min(acks, this.#urgentDue, this.#routineDue);
  }

  /** Whether acks buffered in some part are still awaited (the flush waits for them rather than for a pause). */
  #awaiting(): boolean {
    for (const part of this.#parts) if (part.awaiting?.()) return true;
    return false;
  }

  /** Nothing urgent is due any more: a flush takes what was buffered, or nothing was (acks and urgent changes). */
  #clearDue(): void {
    this.#ackFirst = this.#urgentDue = Infinity;
    this.#ackLast = -Infinity;
    this.#ackComplete = false;
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

  /** `everything`: heartbeat-rate writes too, even before they are due (a timer's flush leaves them to their own). */
  async #flush(everything: boolean): Promise<void> {
    while (this.#flushing) await this.#flushing;
    const routine = everything || this.#routineDue <= Date.now();
    const urgent = this.#urgentNodes || this.#fleetChanged || this.#parts.some((part) => part.urgent);
    if (!urgent) {
      this.#clearDue();
      if (!(routine && (this.#nodes.size > 0 || this.#parts.some((part) => part.routine)))) return this.#arm();
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
    const writeNodes = routine || this.#urgentNodes;
    if (writeNodes) for (const part of this.#parts) part.foldNodes?.((stream, change) => this.#merge(stream, change));
    const nodes = writeNodes ? [...this.#nodes.values()] : [];
    const fleet: FleetChange = { changed: this.#fleetChanged, offline: [...this.#offlineNodes] };
    if (writeNodes) {
      this.#nodes = new Map();
      this.#urgentNodes = false;
    }
    if (routine) this.#routineDue = Infinity;
    this.#offlineNodes = new Set();
    this.#fleetChanged = false;
    const batches: PartBatch[] = [];
    for (const part of this.#parts) {
      const batch = part.take(routine, fleet);
      if (batch) batches.push(batch);
    }
    this.#clearDue();
    // One entity manager serves every flush (they run one at a time), emptied before each: forking one per flush
    // cost more than the ack statement's own client work. A failed flush drops it (its state is unknown).
    const em = (this.#flushEm ??= this.#em());
    em.clear();
    const now = this.#clock.now();
    try {
      if (nodes.length) await this.#writeNodes(em, nodes, now);
      for (const batch of batches) await batch.write(em, now);
    } catch (error) {
      this.#flushEm = null;
      // Put back what was not written (newer buffered values win) so the retry writes it.
      for (const n of nodes) {
        const key = nodeKey(n.id as string, n.connected_at as Date);
        if (!this.#nodes.has(key)) this.#nodes.set(key, n);
      }
      if (nodes.length) this.#urgentNodes = true;
      for (const batch of batches) batch.putBack();
      for (const id of fleet.offline) this.#offlineNodes.add(id);
      this.#fleetChanged ||= fleet.changed;
      throw error;
    }
  }

  /** One statement for every node row buffered, each applied only while the row still belongs to its stream. */
  async #writeNodes(em: EntityManager, nodes: Record<string, unknown>[], now: Date): Promise<void> {
    this.#nodeStatement ??= this.#nodeSql();
    await executeBound(em, this.#nodeStatement, [now, JSON.stringify(nodes), this.#replicaId]);
  }

  #nodeSql(): string {
    const sets: string[] = [];
    const types: Record<string, string> = { id: 'uuid', connected_at: 'timestamptz' };
    for (const [name, column] of Object.entries(this.#columns)) {
      types[name] = column.type;
      if (column.merge === 'latest') sets.push(`${name} = coalesce(x.${name}, n.${name})`);
      else if (column.merge === 'max' && column.clearedBy) {
        const by = column.clearedBy;
        sets.push(`${name} = case when greatest(n.${name}, x.${name}) <= coalesce(x.${by}, n.${by}) then null else greatest(n.${name}, x.${name}) end`);
      } else if (column.merge === 'max') sets.push(`${name} = greatest(n.${name}, x.${name})`);
      else {
        types[`set_${name}`] = 'boolean';
        sets.push(`${name} = case when x.set_${name} then x.${name} else n.${name} end`);
      }
    }
    return `update cdn_edge_node n set ${sets.join(', ')}, updated_at = $1
       from ${recordset(types, 'x', '$2')}
       where n.id = x.id and n.connected_at = x.connected_at and n.replica_id = $3`;
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
