// The control channel's session layer on this replica (DESIGN.md §7, §9;
// issues 12 and 21): the agents' streams and what every stream has whatever
// it carries — authentication, Hello and the node's registration, one stream
// per node (takeover here, and on other replicas through pub/sub), messages
// sent before the stream is registered, revocation of agent tokens,
// heartbeats and liveness (the sweep of silent nodes), Welcome, the tick, the
// pub/sub plumbing and the dispatch of what agents send. What a stream
// carries comes from feeds (channel-feed.ts: configuration, purges, prefetch,
// origin health, traffic reports), which plug in through the Feed interface;
// this file knows none of them. Work is announced through the store's pub/sub
// (Redis across replicas), so each replica pushes to the agents it holds;
// what a replica may have missed (a lost message, a Redis outage) is picked
// up by the feeds' polls on every tick.
import { create } from '@bufbuild/protobuf';
import { status as GrpcStatus } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { AckKind, ConnectResponseSchema, type ConnectRequest, type Heartbeat, type Hello } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { SECOND } from '../core/clock.ts';
import { withTimeout } from '../core/timeout.ts';
import type { Config } from '../config/config.ts';
import type { KeyValueStore } from '../store/index.ts';
import { UUID, safeNumber, type ChannelContext, type Feed, type WelcomeFields } from './channel-feed.ts';
import { AgentStream, endCall, type AgentCall } from './channel-stream.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL, type AgentTokenVerifier } from './contracts.ts';
import { sweepSilentNodes } from './nodes-service.ts';

/** Published when a node's stream opens, with {node_id, replica_id, connected_at (ms)}: another replica still holding an older stream of it closes that one. */
export const NODE_CONNECTED_CHANNEL = 'edge:node-connected';

/** How long an agent has to send Hello after its stream opens. */
export const HELLO_TIMEOUT_MS = 10 * SECOND;
/** Bound on each database or token check an opening stream waits for. */
const OPENING_TIMEOUT_MS = 10 * SECOND;
/** How long a revocation is remembered for streams still opening: longer than a stream may take from its token's check to its registration. */
const REVOKED_MEMORY_MS = HELLO_TIMEOUT_MS + 3 * OPENING_TIMEOUT_MS;
/** A node silent for this many heartbeat intervals is offline. */
export const SILENT_INTERVALS = 3;
/** The metrics' names of the acknowledgement kinds. */
const ACK_KIND_NAMES: Partial<Record<AckKind, string>> = { [AckKind.CONFIG]: 'config', [AckKind.PURGE]: 'purge', [AckKind.PREFETCH]: 'prefetch' };
/** Messages an agent may send before its stream is registered (Hello and little else). */
const MAX_EARLY_MESSAGES = 64;

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Why a Hello cannot register a node (the field and the rule), or null: the node's own fields, then each feed's. */
export function helloProblem(hello: Hello, feeds: readonly Pick<Feed, 'helloProblem'>[] = []): string | null {
  if (!UUID.test(hello.nodeId)) return 'node_id must be a UUID';
  if (!hello.hostname || hello.hostname.length > 253 || CONTROL.test(hello.hostname) || /\s/.test(hello.hostname)) return 'hostname must be 1..253 characters without spaces or control characters';
  if (!hello.region || hello.region.length > 64 || CONTROL.test(hello.region)) return 'region must be 1..64 characters without control characters';
  if (hello.agentVersion.length > 64 || CONTROL.test(hello.agentVersion)) return 'agent_version must be at most 64 characters without control characters';
  for (const feed of feeds) {
    const problem = feed.helloProblem?.(hello);
    if (problem) return problem;
  }
  return null;
}

/** The bearer token of a call's `authorization` metadata, or null. */
function bearerToken(call: AgentCall): string | null {
  const value = call.metadata.get('authorization')[0];
  if (typeof value !== 'string') return null;
  const match = /^Bearer\s+(\S+)$/i.exec(value.trim());
  return match ? match[1]! : null;
}

class StreamRefused extends Error {
  readonly code: GrpcStatus;

  constructor(code: GrpcStatus, message: string) {
    super(message);
    this.code = code;
  }
}

export interface ChannelHubOptions {
  context: ChannelContext;
  store: KeyValueStore;
  config: Pick<Config, 'EDGE_HEARTBEAT_INTERVAL_MS' | 'SHUTDOWN_TIMEOUT_MS'>;
  /** Read when a stream opens: the service that provides it may start after the channel, and tests replace it. */
  tokens: () => AgentTokenVerifier | undefined;
  /** In the order they open on a stream and are polled. */
  feeds: readonly Feed<any>[];
  /** This process's id on the nodes it holds (cdn_edge_node.replica_id). */
  replicaId: string;
}

export class ChannelHub {
  readonly replicaId: string;
  readonly #context: ChannelContext;
  readonly #store: KeyValueStore;
  readonly #config: ChannelHubOptions['config'];
  readonly #tokens: () => AgentTokenVerifier | undefined;
  readonly #feeds: readonly Feed<any>[];
  /** The feed (its index) taking each ack kind. */
  readonly #byAck: (number | undefined)[] = [];
  readonly #byMessage = new Map<string, number>();
  readonly #streams = new Map<string, AgentStream>();
  readonly #byToken = new Map<string, Set<AgentStream>>();
  /** Agent tokens revoked lately (ms): a stream verified before the revocation but registered after it is refused. */
  readonly #revokedAt = new Map<string, number>();
  readonly #unsubscribe: (() => Promise<void> | void)[] = [];
  #registrationReturning: string | null = null;
  #tick: NodeJS.Timeout | null = null;
  #polling: Promise<void> | null = null;
  /** Resolves once every subscription is in place (tests wait for it before announcing work). */
  subscribed: Promise<void> = Promise.resolve();
  #lastConnectMs = 0;
  #closing = false;

  constructor(options: ChannelHubOptions) {
    this.replicaId = options.replicaId;
    this.#context = options.context;
    this.#store = options.store;
    this.#config = options.config;
    this.#tokens = options.tokens;
    this.#feeds = options.feeds;
    for (const [index, feed] of this.#feeds.entries()) {
      for (const kind of feed.ackKinds ?? []) {
        if (this.#byAck[kind] !== undefined) throw new Error(`ack kind ${kind} is taken by two feeds`);
        this.#byAck[kind] = index;
      }
      for (const message of feed.messages ?? []) this.#byMessage.set(message, index);
      if (feed.node) this.#context.writer.addNodeColumns(feed.node.columns);
    }
  }

  get #log(): Logger {
    return this.#context.log;
  }

  get #now(): Date {
    return this.#context.clock.now();
  }

  /** The streams held now (tests and diagnostics). */
  get streamCount(): number {
    return this.#streams.size;
  }

  /**
   * Subscribes, starts the feeds and the tick. Nothing here waits for PostgreSQL or Redis (the control plane
   * starts, and reports its readiness, while they are down): the subscriptions complete when Redis answers,
   * and the feeds read what they need on their first use or tick.
   */
  start(): void {
    for (const feed of this.#feeds) feed.start?.();
    const pending: Promise<unknown>[] = [];
    const on = (channel: string, handler: (message: Record<string, unknown>, local: boolean) => void) => {
      pending.push(this.#store.subscribe(channel, (raw, local) => {
        let message: Record<string, unknown>;
        try {
          message = JSON.parse(raw);
        } catch {
          return;
        }
        if (message && typeof message === 'object') handler(message, local);
      }).then((unsubscribe) => {
        if (this.#closing) void unsubscribe();
        else this.#unsubscribe.push(unsubscribe);
      }, (error: unknown) => this.#closing || this.#log.error({ err: error, channel }, 'edge channel: subscribing failed')));
    };
    on(AGENT_TOKEN_REVOKED_CHANNEL, (m, local) => {
      if (typeof m.id !== 'string' || !UUID.test(m.id)) return;
      const id = m.id.toLowerCase();
      // Checked against this database unless this process revoked it: another deployment's message names no token of ours.
      if (local) this.#revoke(id);
      else void this.#context.safely('agent token revocation', () => this.#revokeUnlessActive(id));
    });
    on(NODE_CONNECTED_CHANNEL, (m) => void this.#context.safely('node takeover', () => this.#connectedElsewhere(m)));
    for (const feed of this.#feeds) for (const [channel, handler] of Object.entries(feed.subjects ?? {})) on(channel, handler);
    this.subscribed = Promise.all(pending).then(() => {});
    // Messages published while the subscription was down are lost: catch up when it is back.
    let wasLive = true;
    this.#unsubscribe.push(this.#store.onSubscriptionState((live) => {
      if (live && !wasLive) {
        void this.#context.safely('re-checking agent tokens', () => this.recheckTokens());
        void this.poll();
      }
      wasLive = live;
    }));
    this.#tick = setInterval(() => this.#polling || void this.poll(), this.#config.EDGE_HEARTBEAT_INTERVAL_MS);
    this.#tick.unref();
  }

  /**
   * The periodic catch-up of every replica: silent nodes, then each feed's poll (what it may have missed).
   * One runs at a time (a call during one waits for it, then runs again: tests rely on it).
   */
  async poll(): Promise<void> {
    while (this.#polling) await this.#polling;
    if (this.#closing) return;
    this.#polling = (async () => {
      await this.#context.safely('sweeping silent nodes', () => this.sweep());
      for (const feed of this.#feeds) if (feed.poll) await this.#context.safely(`${feed.name} poll`, () => feed.poll!());
    })().finally(() => {
      this.#polling = null;
    });
    await this.#polling;
  }

  /**
   * Closes the streams whose agent token is no longer active (revoked or expired): a revocation announced
   * while this replica's subscription was down never reached it. Run when the subscription comes back.
   */
  async recheckTokens(): Promise<number> {
    const ids = [...this.#byToken.keys()];
    if (!ids.length) return 0;
    const rows = await this.#context.em().getConnection().execute<{ id: string }[]>(
      `select id from cdn_agent_token where id in (${ids.map(() => '?').join(', ')}) and status = 'active' and (expires_at is null or expires_at > ?)`,
      [...ids, this.#now]);
    const active = new Set(rows.map((r) => r.id));
    let closed = 0;
    for (const id of ids) {
      if (active.has(id)) continue;
      closed += this.#byToken.get(id)?.size ?? 0;
      this.#revoke(id);
    }
    return closed;
  }

  /** Marks offline the nodes whose heartbeats stopped (3 intervals), on any replica. */
  async sweep(): Promise<string[]> {
    const now = this.#now;
    const silentSince = new Date(now.getTime() - SILENT_INTERVALS * this.#config.EDGE_HEARTBEAT_INTERVAL_MS);
    const gone = await sweepSilentNodes(this.#context.em(), silentSince, now);
    if (gone.length) {
      this.#log.info({ nodes: gone.length }, 'edge nodes marked offline: no heartbeat');
      this.#context.writer.nodesWentOffline(gone);
    }
    return gone;
  }

  /** Writes buffered acknowledgements and heartbeats now (tests; shutdown). */
  flush(): Promise<void> {
    return this.#context.writer.flush();
  }

  // ---- streams -------------------------------------------------------------

  /** Serves one Connect call (never throws; every failure ends the call with a status). */
  handle(call: AgentCall): void {
    if (this.#closing) return endCall(call, GrpcStatus.UNAVAILABLE, 'control plane shutting down');
    let stream: AgentStream | null = null;
    let early: ConnectRequest[] | null = [];
    let firstMessage: (() => void) | null = null;
    let ended = false;
    const finish = () => {
      if (ended) return;
      ended = true;
      if (stream) this.#gone(stream);
    };
    call.on('data', (message: ConnectRequest) => {
      if (ended) return;
      if (early === null) return this.#onMessage(stream!, message);
      if (early.length >= MAX_EARLY_MESSAGES) return endCall(call, GrpcStatus.RESOURCE_EXHAUSTED, 'too many messages before Hello was answered');
      early.push(message);
      firstMessage?.();
    });
    call.on('end', () => {
      // The agent closed its side: close ours (status OK).
      finish();
      if (!call.writableEnded) call.end();
    });
    for (const event of ['cancelled', 'error', 'close', 'finish'] as const) call.on(event, finish);

    const opening = async () => {
      const token = bearerToken(call);
      if (!token) throw new StreamRefused(GrpcStatus.UNAUTHENTICATED, 'missing agent token (metadata authorization: Bearer <token>)');
      const verifier = this.#tokens();
      if (!verifier) throw new StreamRefused(GrpcStatus.UNAUTHENTICATED, 'agent tokens cannot be checked on this control plane');
      const verifying = Date.now();
      const verified = await withTimeout(verifier.verify(token), OPENING_TIMEOUT_MS, () => new StreamRefused(GrpcStatus.UNAVAILABLE, 'checking the agent token timed out'));
      if (!verified) throw new StreamRefused(GrpcStatus.UNAUTHENTICATED, 'invalid, revoked or expired agent token');
      if (ended) return;
      if (!early!.length) {
        await withTimeout(new Promise<void>((resolve) => (firstMessage = resolve)), HELLO_TIMEOUT_MS,
          () => new StreamRefused(GrpcStatus.INVALID_ARGUMENT, `expected Hello within ${HELLO_TIMEOUT_MS / SECOND} s`));
      }
      if (ended) return;
      const first = early!.shift()!;
      if (first.message.case !== 'hello') throw new StreamRefused(GrpcStatus.INVALID_ARGUMENT, 'the first message must be Hello');
      const hello = first.message.value;
      const problem = helloProblem(hello, this.#feeds);
      if (problem) throw new StreamRefused(GrpcStatus.INVALID_ARGUMENT, `Hello: ${problem}`);
      stream = await withTimeout(this.#register(call, hello, verified.id), OPENING_TIMEOUT_MS,
        () => new StreamRefused(GrpcStatus.UNAVAILABLE, 'registering the node timed out'));
      if (ended) return this.#gone(stream);
      // A revocation announced between the token's check and now found no stream of it to close: this one closes now.
      if ((this.#revokedAt.get(verified.id) ?? -Infinity) >= verifying) return stream.end(GrpcStatus.UNAUTHENTICATED, 'agent token revoked');
      // From here messages are handled as they come (acks of the pushes below included).
      const queued = early!;
      early = null;
      for (const message of queued) this.#onMessage(stream, message);
      await this.#open(stream);
    };
    opening().catch((error: unknown) => {
      if (error instanceof StreamRefused) {
        if (stream) stream.end(error.code, error.message);
        else endCall(call, error.code, error.message);
        return;
      }
      this.#log.error({ err: error, node_id: stream?.nodeId }, 'edge channel: opening a stream failed');
      if (stream) stream.end(GrpcStatus.UNAVAILABLE, 'the control plane could not open the stream; retry');
      else endCall(call, GrpcStatus.UNAVAILABLE, 'the control plane could not open the stream; retry');
    });
  }

  /** A connection time that orders this replica's streams of a node (two in the same millisecond get distinct times). */
  #connectTime(): Date {
    this.#lastConnectMs = Math.max(this.#now.getTime(), this.#lastConnectMs + 1);
    return new Date(this.#lastConnectMs);
  }

  /** What the registration statement reads back for the feeds (their node columns, as text). */
  #returning(): string {
    if (this.#registrationReturning === null) {
      const read = this.#feeds.flatMap((feed) => feed.node?.read ?? []);
      this.#registrationReturning = read.length ? read.map((column) => `${column}::text as ${column}`).join(', ') : 'id';
    }
    return this.#registrationReturning;
  }

  /** Upserts the node as online on this replica (with what the feeds take from Hello), takes over from an older stream of it here, and attaches the feeds. */
  async #register(call: AgentCall, hello: Hello, tokenId: string): Promise<AgentStream> {
    const nodeId = hello.nodeId.toLowerCase();
    const connectedAt = this.#connectTime();
    const now = this.#now;
    const own: Record<string, unknown> = {
      id: nodeId, hostname: hello.hostname, region: hello.region, status: 'online', agent_version: hello.agentVersion,
      last_seen_at: now, connected_at: connectedAt, replica_id: this.replicaId, agent_token_id: tokenId, created_at: now, updated_at: now,
    };
    const fromFeeds: Record<string, unknown> = {};
    for (const feed of this.#feeds) Object.assign(fromFeeds, feed.node?.fromHello?.(hello));
    const values = { ...own, ...fromFeeds };
    const names = Object.keys(values);
    // A new row starts with empty cache counts; an existing one keeps its created_at and counts until the first heartbeat.
    // Its presence keeps the stream before this one: when it opened, and when it ended (now, if it was still online).
    const updated = names.filter((name) => name !== 'id' && name !== 'created_at');
    const [row] = await this.#context.em().execute<Record<string, unknown>[]>(
      `insert into cdn_edge_node (${names.join(', ')}) values (${names.map(() => '?').join(', ')})
       on conflict (id) do update set ${updated.map((name) => `${name} = excluded.${name}`).join(', ')},
         previous_connected_at = cdn_edge_node.connected_at,
         offline_at = case when cdn_edge_node.status = 'offline' then cdn_edge_node.offline_at else excluded.connected_at end
       returning ${this.#returning()}`,
      names.map((name) => values[name]),
    );
    const stream = new AgentStream({ call, nodeId, tokenId, connectedAt, hostname: hello.hostname });
    for (const feed of this.#feeds) stream.feedStates.push(feed.attach(stream, hello, row ?? {}));
    const older = this.#streams.get(nodeId);
    if (older) {
      this.#forget(older);
      older.end(GrpcStatus.ABORTED, 'replaced by a newer stream of the same node');
    }
    this.#streams.set(nodeId, stream);
    let byToken = this.#byToken.get(tokenId);
    if (!byToken) this.#byToken.set(tokenId, (byToken = new Set()));
    byToken.add(stream);
    this.#store.publish(NODE_CONNECTED_CHANNEL, JSON.stringify({ node_id: nodeId, replica_id: this.replicaId, connected_at: connectedAt.getTime() }))
      .catch(() => {});
    this.#context.writer.fleetChanged();
    this.#log.info({ node_id: nodeId, hostname: hello.hostname, region: hello.region, ...fromFeeds }, 'edge node connected');
    return stream;
  }

  /** Welcome (with what each feed adds), then each feed's opening in feed order. */
  async #open(stream: AgentStream): Promise<void> {
    const fields: WelcomeFields = {};
    for (const [index, feed] of this.#feeds.entries()) {
      if (!feed.welcome) continue;
      Object.assign(fields, await withTimeout(Promise.resolve(feed.welcome(stream, stream.feedStates[index])), OPENING_TIMEOUT_MS,
        () => new StreamRefused(GrpcStatus.UNAVAILABLE, `preparing the ${feed.name} to send timed out`)));
    }
    if (stream.closed) return;
    stream.write(encodeResponse(create(ConnectResponseSchema, {
      message: { case: 'welcome', value: { ...fields, nodeId: stream.nodeId, heartbeatIntervalMs: this.#config.EDGE_HEARTBEAT_INTERVAL_MS } },
    })));
    stream.welcomed = true;
    for (const [index, feed] of this.#feeds.entries()) {
      if (stream.closed) return;
      if (feed.open) await feed.open(stream, stream.feedStates[index]);
    }
  }

  /** Takes the stream out of the maps, and out of the feeds (once). */
  #forget(stream: AgentStream): void {
    if (stream.forgotten) return;
    stream.forgotten = true;
    if (this.#streams.get(stream.nodeId) === stream) this.#streams.delete(stream.nodeId);
    const byToken = this.#byToken.get(stream.tokenId);
    byToken?.delete(stream);
    if (byToken?.size === 0) this.#byToken.delete(stream.tokenId);
    for (const [index, feed] of this.#feeds.entries()) feed.detach?.(stream, stream.feedStates[index]);
  }

  /** The stream ended (either side, or the connection): the node is offline unless it has reconnected since (the write is guarded by connected_at). */
  #gone(stream: AgentStream): void {
    stream.closed = true;
    this.#forget(stream);
    this.#context.writer.node(stream, { status: 'offline', offline_at: this.#now }, true);
    this.#log.info({ node_id: stream.nodeId }, 'edge node stream ended');
  }

  #revoke(tokenId: string): void {
    const now = Date.now();
    // Kept as long as a stream can take from its token's check to its registration (the Hello wait and two database steps).
    for (const [id, at] of this.#revokedAt) if (at < now - REVOKED_MEMORY_MS) this.#revokedAt.delete(id);
    this.#revokedAt.set(tokenId, now);
    const streams = [...(this.#byToken.get(tokenId) ?? [])];
    for (const stream of streams) stream.end(GrpcStatus.UNAUTHENTICATED, 'agent token revoked');
    if (streams.length) this.#log.info({ token_id: tokenId, streams: streams.length }, 'streams of a revoked agent token closed');
  }

  /** Closes the streams of an agent token this database does not hold active (another process of this deployment revoked it). */
  async #revokeUnlessActive(tokenId: string): Promise<void> {
    const [active] = await this.#context.em().execute<{ id: string }[]>(
      `select id from cdn_agent_token where id = ? and status = 'active' and (expires_at is null or expires_at > ?)`, [tokenId, this.#now]);
    if (!active) this.#revoke(tokenId);
  }

  /**
   * Another replica took a node this one holds a stream of: the older stream ends, once this database confirms
   * that replica holds the node now (another deployment's message changes nothing here).
   */
  async #connectedElsewhere(message: Record<string, unknown>): Promise<void> {
    const { node_id: nodeId, replica_id: replicaId, connected_at: connectedAt } = message;
    if (replicaId === this.replicaId || typeof replicaId !== 'string' || typeof nodeId !== 'string' || typeof connectedAt !== 'number' || !Number.isSafeInteger(connectedAt)) return;
    const stream = this.#streams.get(nodeId);
    if (!stream || stream.connectedAt.getTime() >= connectedAt) return;
    const [held] = await this.#context.em().execute<{ id: string }[]>(
      `select id from cdn_edge_node where id = ? and replica_id = ? and connected_at = ?`, [nodeId, replicaId, new Date(connectedAt)]);
    if (held && !stream.closed) stream.end(GrpcStatus.ABORTED, 'the node connected to another control-plane replica');
  }

  // ---- what agents send ----------------------------------------------------

  #onMessage(stream: AgentStream, message: ConnectRequest): void {
    if (stream.closed) return;
    const body = message.message;
    switch (body.case) {
      case 'ack': {
        const version = safeNumber(body.value.version);
        const index = this.#byAck[body.value.kind];
        if (version === null || index === undefined) return;
        this.#context.metrics.ack(ACK_KIND_NAMES[body.value.kind] ?? 'other', body.value.ok);
        return this.#feeds[index]!.onAck?.(stream, stream.feedStates[index], body.value, version);
      }
      case 'heartbeat': return this.#onHeartbeat(stream, body.value);
      case 'hello': return stream.end(GrpcStatus.INVALID_ARGUMENT, 'Hello may be sent once per stream');
      case undefined: return;
      default: {
        const index = this.#byMessage.get(body.case);
        if (index !== undefined) this.#feeds[index]!.onMessage?.(stream, stream.feedStates[index], body);
      }
    }
  }

  /** Liveness (last seen, draining, the cache's size), then whatever the feeds read from the heartbeat. */
  #onHeartbeat(stream: AgentStream, heartbeat: Heartbeat): void {
    const draining = heartbeat.status === 'draining';
    const changed = draining !== stream.draining;
    stream.draining = draining;
    this.#context.writer.node(stream, {
      last_seen_at: this.#now,
      status: draining ? 'draining' : 'online',
      cache_objects: safeNumber(heartbeat.cacheObjects) ?? Number.MAX_SAFE_INTEGER,
      cache_bytes: safeNumber(heartbeat.cacheBytes) ?? Number.MAX_SAFE_INTEGER,
    }, changed);
    for (const [index, feed] of this.#feeds.entries()) feed.onHeartbeat?.(stream, stream.feedStates[index], heartbeat);
  }

  /** Ends every stream (agents reconnect to another replica) and writes what is buffered. */
  async close(): Promise<void> {
    this.#closing = true;
    this.#context.closing = true;
    if (this.#tick) clearInterval(this.#tick);
    const bound = (work: Promise<unknown>, what: string) =>
      withTimeout(work, this.#config.SHUTDOWN_TIMEOUT_MS, () => new Error(`${what} timed out`)).catch((error: unknown) => {
        this.#log.warn({ err: error }, `edge channel shutdown: ${what} failed`);
      });
    await bound(Promise.all(this.#unsubscribe.splice(0).map((unsubscribe) => unsubscribe())), 'unsubscribing');
    for (const stream of [...this.#streams.values()]) stream.end(GrpcStatus.UNAVAILABLE, 'control plane shutting down');
    await bound(this.#context.writer.close(), 'writing what agents acknowledged');
  }
}
