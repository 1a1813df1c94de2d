// The seam between the control channel's session layer (channel-hub.ts:
// streams, Hello, registration, liveness, the tick, pub/sub, dispatch) and
// the feeds that plug into it (configuration, purges, prefetch, origin
// health, traffic reports), in the shape of Envoy's go-control-plane
// (pkg/server/stream and its callbacks): the session layer knows no feed; each
// feed says what it adds to Welcome, what it sends when a stream opens, which
// acknowledgements and messages it takes, which pub/sub subjects it listens
// on, what it catches up on each tick, the state it keeps per stream and what
// it does when a stream ends. Feeds keep their own collections of streams
// (a purge fan-out walks the purge feed's own set, not the session map).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import type { Ack, AckKind, ConnectRequest, Heartbeat, Hello, WelcomeSchema } from '../../../shared/gen/edge/v1/control_pb.ts';
import type { Clock } from '../core/clock.ts';
import { isStorableDate } from '../http/schemas.ts';
import { ChannelMetrics } from './channel-metrics.ts';
import type { AgentStream } from './channel-stream.ts';
import type { ChannelWriter, NodeColumn } from './channel-writer.ts';

/** Fields a feed adds to Welcome (the session layer sets node_id and heartbeat_interval_ms). */
export type WelcomeFields = Omit<MessageInitShape<typeof WelcomeSchema>, 'nodeId' | 'heartbeatIntervalMs' | '$typeName'>;

/** Messages an agent sends besides Hello, acknowledgements and heartbeats (a feed names those it takes). */
export type AgentMessageCase = Exclude<ConnectRequest['message']['case'], 'hello' | 'ack' | 'heartbeat' | undefined>;

/** The node row's columns a feed owns: set from Hello when the node registers, merged as declared when changed later. */
export interface FeedNodeColumns {
  /** Column → how the coalesced writer merges and writes it (channel-writer.ts). */
  readonly columns: Readonly<Record<string, NodeColumn>>;
  /** What the agent says it holds, written at registration (its word, even when lower than before). */
  fromHello?(hello: Hello): Record<string, number | string | null>;
  /** Columns read back at registration, handed to attach (e.g. a refusal kept across reconnects). */
  readonly read?: readonly string[];
}

export interface Feed<S = unknown> {
  /** Named in logs and errors. */
  readonly name: string;
  /**
   * Store channels (Redis pub/sub across replicas) it listens on → the handler of a parsed JSON object. `local`:
   * published by this process; anything else is checked against this database before it is acted on (issue 21
   * item 4: a process of another deployment may share the namespace).
   */
  readonly subjects?: Readonly<Record<string, (message: Record<string, unknown>, local: boolean) => void>>;
  /** Acknowledgement kinds it takes (each kind belongs to one feed). */
  readonly ackKinds?: readonly AckKind[];
  /** Other agent messages it takes. */
  readonly messages?: readonly AgentMessageCase[];
  readonly node?: FeedNodeColumns;
  /** Why the Hello's fields this feed reads are unusable (the field and the rule), or null: the stream is refused (INVALID_ARGUMENT). */
  helloProblem?(hello: Hello): string | null;
  /** Starts its background reads; never waits for PostgreSQL or Redis. */
  start?(): void;
  /** The state it keeps for a stream that just registered (`row`: the node columns it reads back). */
  attach(stream: AgentStream, hello: Hello, row: Readonly<Record<string, unknown>>): S;
  /** Before Welcome, in feed order: the fields it adds (bounded by the session layer). */
  welcome?(stream: AgentStream, state: S): WelcomeFields | Promise<WelcomeFields>;
  /** After Welcome, in feed order, awaited: what the agent lacks. */
  open?(stream: AgentStream, state: S): Promise<void>;
  /** An acknowledgement of one of its kinds; `version` is Ack.version, checked to be a safe integer. */
  onAck?(stream: AgentStream, state: S, ack: Ack, version: number): void;
  /** Every heartbeat (after the session layer recorded the node's liveness). */
  onHeartbeat?(stream: AgentStream, state: S, heartbeat: Heartbeat): void;
  onMessage?(stream: AgentStream, state: S, message: ConnectRequest['message']): void;
  /** The stream ended or was replaced (once per stream). */
  detach?(stream: AgentStream, state: S): void;
  /** The periodic catch-up: each tick, and when the pub/sub subscription comes back. */
  poll?(): Promise<void>;
}

/** What the session layer and its feeds share: the database, the clock, the coalesced writer, and failure logging. */
export class ChannelContext {
  readonly em: () => EntityManager;
  readonly clock: Clock;
  readonly log: Logger;
  readonly writer: ChannelWriter;
  /** The channel's Prometheus metrics (connected agents, acks, ack latencies, traffic reports). */
  readonly metrics: ChannelMetrics;
  /** Set when the channel shuts down: failures are no longer reported. */
  closing = false;

  constructor(init: { em: () => EntityManager; clock: Clock; log: Logger; writer: ChannelWriter; metrics?: ChannelMetrics }) {
    this.em = init.em;
    this.clock = init.clock;
    this.log = init.log;
    this.writer = init.writer;
    this.metrics = init.metrics ?? new ChannelMetrics(() => 0);
  }

  /** Runs `work`, logging its failure (unless shutting down); never rejects. */
  async safely(what: string, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (error) {
      if (!this.closing) this.log.error({ err: error }, `edge channel: ${what} failed`);
    }
  }
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CONTROL_ALL = /[\u0000-\u001f\u007f-\u009f]/g;

/** An agent's free text (errors, reasons) made safe to store and show: no control characters, bounded. */
export function agentText(text: string, max = 2_000): string {
  const clean = text.replace(CONTROL_ALL, ' ').trim();
  return clean.length > max ? `${clean.slice(0, max - 1)}…` : clean;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A protobuf uint64 as a number, or null beyond 2^53. */
export const safeNumber = (value: bigint): number | null => (value > MAX_SAFE ? null : Number(value));

/** Milliseconds since the epoch from an agent as a storable date, or null. */
export const msDate = (ms: bigint): Date | null => {
  if (ms <= 0n || ms > MAX_SAFE) return null;
  const date = new Date(Number(ms));
  return isStorableDate(date) ? date : null;
};
