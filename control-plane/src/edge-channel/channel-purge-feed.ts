// The purge feed of the control channel (DESIGN.md §5 purge bullet, §7; a
// feed of the session layer, channel-feed.ts): Welcome names the platform's
// latest purge (behind it the agent serves nothing from its cache until the
// missed purges, which follow, are applied); a stream that opens is sent the
// purges after its own (only those still open when its cache is empty, or
// when it missed too many and is told to drop its cache), then every purge
// announced (PURGE_SUBMITTED_CHANNEL) or found on a tick, in sequence order,
// the same encoded bytes to every stream. PURGE acks are buffered in the
// channel's writer (PurgeAckBuffer) and stored in one statement per flush;
// the acks of a purge just fanned out are awaited by count. The feed owns the
// node column purge_sequence, which follows the node's acks and heartbeats.
import { AckKind, type Ack, type Heartbeat, type Hello } from '../../../shared/gen/edge/v1/control_pb.ts';
import { PURGE_SUBMITTED_CHANNEL } from '../cdn/index.ts';
import { UUID, agentText, safeNumber, type ChannelContext, type Feed, type WelcomeFields } from './channel-feed.ts';
import { PurgeRing, evaluatePurges, failLatePurges, recordPurgeAcks, recoverLatePurges, type EncodedPurge, type PurgeAckRow, type PurgeRow } from './channel-purges.ts';
import type { AgentStream } from './channel-stream.ts';
import type { ChannelWriter, FleetChange, NodeChange, NodeStream, PartBatch, WriterPart } from './channel-writer.ts';

/** Purges whose acks are awaited by count, at most (the oldest are forgotten: their acks then wait for a pause). */
const AWAITED_PURGES = 1_000;

const PURGE_TYPES = new Set(['path', 'wildcard', 'tag', 'all']);
const strings = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** The purge an announcement carries (cdn/announcements.ts), checked; null when it carries none or it is malformed (then it is read from the database). */
export function announcedPurge(value: unknown): (PurgeRow & { sequence: number }) | null {
  if (!value || typeof value !== 'object') return null;
  const p = value as Record<string, unknown>;
  if (typeof p.id !== 'string' || !UUID.test(p.id) || !(p.distribution_id === null || (typeof p.distribution_id === 'string' && UUID.test(p.distribution_id)))) return null;
  if (!Number.isSafeInteger(p.sequence) || (p.sequence as number) <= 0 || !PURGE_TYPES.has(p.purge_type as string) || !strings(p.paths) || !strings(p.tags)) return null;
  return { id: p.id, sequence: p.sequence as number, distribution_id: p.distribution_id as string | null, purge_type: p.purge_type as PurgeRow['purge_type'], paths: p.paths, tags: p.tags, soft: p.soft === true };
}

/**
 * Purge acknowledgements buffered in the channel's writer, by purge then node, stored in one statement per
 * flush (recordPurgeAcks); the purge sequence each stream's node applied, folded into its node row at
 * heartbeat rate; and, when nodes went offline, the open purges counted again.
 */
export class PurgeAckBuffer implements WriterPart {
  readonly #writer: ChannelWriter;
  #acks = new Map<string, Map<string, PurgeAckRow>>();
  /** Acks still to come of purges this replica just fanned out, by purge id (expect). */
  readonly #awaited = new Map<string, number>();
  /** The highest purge sequence each stream's node applied since the last node write. */
  #applied = new Map<NodeStream, number>();

  constructor(writer: ChannelWriter) {
    this.#writer = writer;
    writer.add(this);
  }

  get urgent(): boolean {
    return this.#acks.size > 0;
  }

  get routine(): boolean {
    return this.#applied.size > 0;
  }

  /** Purge `purgeId` was written to `streams` streams: its acks are flushed as soon as that many have arrived. */
  expect(purgeId: string, streams: number): void {
    if (streams <= 0) return;
    if (this.#awaited.size >= AWAITED_PURGES) this.#awaited.delete(this.#awaited.keys().next().value!);
    this.#awaited.set(purgeId, streams);
  }

  add(ack: PurgeAckRow): void {
    this.#buffer(ack, true);
    const left = this.#awaited.get(ack.purge_id);
    if (left !== undefined) {
      if (left > 1) this.#awaited.set(ack.purge_id, left - 1);
      else {
        this.#awaited.delete(ack.purge_id);
        this.#writer.acksComplete();
      }
    }
    this.#writer.acked();
  }

  /**
   * The node behind `stream` applied the purge numbered `sequence`: its purge_sequence moves with the next
   * heartbeat-rate write (at most one row per node per flush, however many purges it acked meanwhile).
   */
  applied(stream: NodeStream, sequence: number): void {
    // Called for every ack (a thousand per purge): kept by stream, and folded into the node changes when they are written.
    const current = this.#applied.get(stream);
    if (current === undefined || current < sequence) this.#applied.set(stream, sequence);
    this.#writer.later();
  }

  /** Buffers an ack under its purge and node; `replace` false keeps an ack of the same node buffered since (a failed flush's put-back). */
  #buffer(ack: PurgeAckRow, replace: boolean): void {
    let byNode = this.#acks.get(ack.purge_id);
    if (!byNode) this.#acks.set(ack.purge_id, (byNode = new Map()));
    if (replace || !byNode.has(ack.node_id)) byNode.set(ack.node_id, ack);
  }

  awaiting(): boolean {
    if (!this.#awaited.size) return false;
    for (const purgeId of this.#acks.keys()) if (this.#awaited.has(purgeId)) return true;
    return false;
  }

  foldNodes(merge: (stream: NodeStream, change: NodeChange) => void): void {
    for (const [stream, sequence] of this.#applied) merge(stream, { purge_sequence: sequence });
    this.#applied = new Map();
  }

  take(_routine: boolean, fleet: FleetChange): PartBatch | null {
    if (!this.#acks.size && !fleet.changed) return null;
    const acks = [...this.#acks.values()].flatMap((byNode) => [...byNode.values()]);
    this.#acks = new Map();
    return {
      write: async (em, now) => {
        if (acks.length) await recordPurgeAcks(em, acks, now);
        // Nodes went offline (or came online): a node that left no longer holds a purge back.
        if (fleet.changed) await evaluatePurges(em, 'open', now);
      },
      putBack: () => {
        for (const ack of acks) this.#buffer(ack, false);
      },
    };
  }
}

/** What the purge feed keeps for one stream. */
export interface PurgeState {
  readonly stream: AgentStream;
  /** The highest purge sequence written to this stream (or the agent's own at Hello). */
  pushed: number;
  /** Set once the purges the agent lacked are written: live fan-out reaches the stream from then on. */
  live: boolean;
  syncing: boolean;
  again: boolean;
  readonly cacheEmpty: boolean;
  readonly acceptsReset: boolean;
  /** The first purges to send, read with Welcome's sequence (one snapshot). */
  opening: EncodedPurge[] | null;
}

/** Purges whose push time is remembered for the ack latency metric. */
const PUSHED_AT_KEPT = 10_000;

export class PurgeFeed implements Feed<PurgeState> {
  readonly name = 'purges';
  readonly ackKinds = [AckKind.PURGE];
  readonly node = {
    columns: { purge_sequence: { type: 'bigint', merge: 'max' } },
    fromHello: (hello: Hello) => ({ purge_sequence: Number(hello.purgeSequence) }),
  } as const;
  readonly subjects: Feed['subjects'];
  readonly ring: PurgeRing;
  readonly acks: PurgeAckBuffer;
  readonly #context: ChannelContext;
  readonly #states = new Set<PurgeState>();
  /** When this replica pushed each recent purge (performance.now(), by sequence): the ack latency metric. */
  readonly #pushedAt = new Map<number, number>();
  /** How long a purge waits for a target that has not applied it (EDGE_PURGE_TIMEOUT_MS). */
  readonly #timeoutMs: number;

  constructor(context: ChannelContext, options: { timeoutMs: number }) {
    this.#context = context;
    this.#timeoutMs = options.timeoutMs;
    this.ring = new PurgeRing(context.em);
    this.acks = new PurgeAckBuffer(context.writer);
    this.subjects = { [PURGE_SUBMITTED_CHANNEL]: (message, local) => this.#announced(message, local) };
  }

  start(): void {
    void this.#context.safely('purge feed', () => this.ring.load());
  }

  helloProblem(hello: Hello): string | null {
    return safeNumber(hello.purgeSequence) === null ? 'purge_sequence is out of range' : null;
  }

  attach(stream: AgentStream, hello: Hello): PurgeState {
    const state: PurgeState = {
      stream, pushed: Number(hello.purgeSequence), live: false, syncing: false, again: false,
      cacheEmpty: hello.cacheEmpty, acceptsReset: hello.acceptsCacheReset, opening: null,
    };
    this.#states.add(state);
    return state;
  }

  detach(_stream: AgentStream, state: PurgeState): void {
    this.#states.delete(state);
  }

  /**
   * Where the stream starts and the first purges after it, read with the platform's latest sequence (one
   * statement): after the agent's own, except only the open ones for an empty cache or one told to reset.
   */
  async welcome(stream: AgentStream, state: PurgeState): Promise<WelcomeFields> {
    const opening = await this.ring.opening(state.pushed, state.cacheEmpty, state.acceptsReset);
    if (opening.reset) {
      this.#context.log.info({ node_id: stream.nodeId, purge_sequence: state.pushed, latest: opening.latest }, 'edge node missed too many purges to replay: told to drop its cache');
    }
    state.pushed = Math.max(state.pushed, opening.start);
    state.opening = opening.purges;
    return { purgeSequence: BigInt(opening.latest), resetCache: opening.reset };
  }

  /** The purges the agent lacks, then live. */
  async open(stream: AgentStream, state: PurgeState): Promise<void> {
    const first = state.opening ?? [];
    state.opening = null;
    for (const purge of first) {
      if (purge.sequence <= state.pushed) continue;
      if (!stream.write(purge.bytes)) return;
      state.pushed = purge.sequence;
    }
    state.live = true;
    await this.#sync(state);
  }

  onAck(stream: AgentStream, state: PurgeState, ack: Ack, version: number): void {
    // Only for a purge this stream was sent (its sequence); the purge id is checked against it when stored.
    if (version <= 0 || version > state.pushed) return;
    // The purge id as this replica wrote it (the usual case: no pattern test, no lower-casing), or any well-formed one.
    const purgeId = this.ring.at(version)?.id === ack.id ? ack.id : UUID.test(ack.id) ? ack.id.toLowerCase() : null;
    if (purgeId === null) return;
    this.acks.add({ purge_id: purgeId, sequence: version, node_id: stream.nodeId, ok: ack.ok, error: ack.ok ? null : agentText(ack.error) || 'failed' });
    const pushedAt = this.#pushedAt.get(version);
    if (pushedAt !== undefined) this.#context.metrics.purgeAcked((performance.now() - pushedAt) / 1000, ack.ok);
    if (ack.ok) this.acks.applied(stream, version);
  }

  onHeartbeat(stream: AgentStream, state: PurgeState, heartbeat: Heartbeat): void {
    const applied = safeNumber(heartbeat.purgeSequence);
    if (applied !== null && applied > 0 && applied <= state.pushed) this.acks.applied(stream, applied);
  }

  /**
   * The purges this replica has not seen yet; then the targets that did not apply a purge within the timeout are counted
   * failed, and those of them whose purge sequence has since reached the purge applied.
   */
  async poll(): Promise<void> {
    await this.#load();
    const now = this.#context.clock.now();
    const failed = await failLatePurges(this.#context.em(), new Date(now.getTime() - this.#timeoutMs), now, durationText(this.#timeoutMs));
    if (failed.length) this.#context.log.warn({ purges: failed.length }, 'purges not applied by every node that must apply them within EDGE_PURGE_TIMEOUT_MS: failed');
    const recovered = await recoverLatePurges(this.#context.em(), now);
    if (recovered.length) this.#context.log.info({ purges: recovered.length }, 'purges applied by nodes they had timed out on: moved on from failed');
  }

  /** Reads the purges this replica has not seen yet from the database and writes them to the streams. */
  async #load(): Promise<void> {
    const added = await this.ring.load();
    if (added.length) this.#push(added);
  }

  /**
   * A purge was stored (here or on another replica). Stored by this process (`local`), announced with its content
   * and next in sequence, it is pushed at once, in this call, without reading the database. Otherwise the ring
   * reads what it lacks from this database: an announcement from elsewhere is a hint, never content to push (a
   * process of another deployment sharing the namespace would otherwise push its purges, and their sequence
   * numbers would hide this deployment's own).
   */
  #announced(message: Record<string, unknown>, local: boolean): void {
    const row = local ? announcedPurge(message.purge) : null;
    const added = row && Number(message.sequence) === row.sequence ? this.ring.offer(row) : null;
    if (added) {
      if (added.length) this.#push(added);
      return;
    }
    void this.#context.safely('purge fan-out', () => this.#load());
  }

  /** Writes the purges each live stream lacks: from memory in this call, or (a stream far behind, or one mid-catch-up) through #sync. */
  #push(added: readonly EncodedPurge[]): void {
    const now = performance.now();
    for (const purge of added) this.#pushedAt.set(purge.sequence, now);
    // Remembered for the ack latency of the recent purges only.
    while (this.#pushedAt.size > PUSHED_AT_KEPT) this.#pushedAt.delete(this.#pushedAt.keys().next().value!);
    const first = added[0]!.sequence;
    const last = added.at(-1)!.sequence;
    let written = 0;
    for (const state of this.#states) {
      if (!state.live) continue;
      if (state.syncing) void this.#context.safely('purge fan-out', () => this.#sync(state));
      else if (state.pushed === first - 1) this.#pushAll(state, added); // the usual case: up to date until these
      else if (!this.#pushRecent(state)) void this.#context.safely('purge fan-out', () => this.#sync(state));
      if (state.pushed === last) written++;
    }
    // Their acks are written the moment the streams written to have all answered (PurgeAckBuffer).
    for (const purge of added) this.acks.expect(purge.id, written);
  }

  #pushAll(state: PurgeState, purges: readonly EncodedPurge[]): void {
    for (const purge of purges) {
      if (!state.stream.write(purge.bytes)) return;
      state.pushed = purge.sequence;
    }
  }

  /** Writes the purges after the stream's last from the ring; false when the ring does not reach back that far. */
  #pushRecent(state: PurgeState): boolean {
    const recent = this.ring.after(state.pushed);
    if (!recent) return false;
    this.#pushAll(state, recent);
    return true;
  }

  /** Writes to the stream every purge after the last one it got, in order: from memory when the ring reaches back, else from the database. */
  async #sync(state: PurgeState): Promise<void> {
    if (state.syncing) {
      state.again = true;
      return;
    }
    state.syncing = true;
    try {
      do {
        state.again = false;
        for (;;) {
          if (state.stream.closed) return;
          const recent = this.ring.after(state.pushed);
          const batch = recent ?? await this.ring.page(state.pushed);
          for (const purge of batch) {
            if (purge.sequence <= state.pushed) continue;
            if (!state.stream.write(purge.bytes)) return;
            state.pushed = purge.sequence;
          }
          if (recent || !batch.length) break;
        }
      } while (state.again);
    } finally {
      state.syncing = false;
    }
  }
}

/** A duration for people: "5 minutes", "90 seconds". */
function durationText(ms: number): string {
  return ms % 60_000 === 0 ? `${ms / 60_000} minute${ms === 60_000 ? '' : 's'}` : `${Math.round(ms / 1000)} seconds`;
}
