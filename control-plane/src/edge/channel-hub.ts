// The agents' streams held by this control-plane replica and everything that
// happens on them (DESIGN.md §7, §9; issue 12): authentication, Hello and the
// node's registration, Welcome, the configuration and the purges the agent
// lacks, then live pushes of publishes, purges and prefetch jobs, the agents'
// acknowledgements and heartbeats, and the node going offline when its stream
// ends. Work is announced through the store's pub/sub (Redis across
// replicas), so each replica pushes to the agents it holds; what a replica may
// have missed (a lost message, a Redis outage) is picked up by a poll on every
// tick. Acknowledgements are recorded in PostgreSQL, so counts include every
// replica's agents.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { create } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import { status as GrpcStatus } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AckKind, ConnectResponseSchema, type Ack, type ConnectRequest, type Heartbeat, type Hello,
} from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { PREFETCH_SUBMITTED_CHANNEL, PURGE_SUBMITTED_CHANNEL } from '../cdn/announcements.ts';
import { HEALTH_STATUSES, type HealthStatus } from '../cdn/cdn.entities.ts';
import { HOUR, SECOND } from '../core/clock.ts';
import { withTimeout } from '../core/timeout.ts';
import { isStorableDate } from '../http/schemas.ts';
import { ConfigPusher } from './channel-config.ts';
import { evaluatePrefetchJobs, openJobsFor, prepareDispatch } from './channel-prefetch.ts';
import { PurgeFeed, type EncodedPurge, type PurgeRow } from './channel-purges.ts';
import { AgentStream, endCall, type AgentCall } from './channel-stream.ts';
import { ChannelWriter } from './channel-writer.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL, CONFIG_PUBLISHED_CHANNEL, type AgentTokenVerifier, type ConfigSource } from './contracts.ts';
import { reconcileDeployments, sweepSilentNodes } from './nodes-service.ts';
import type { EdgeServices } from './services.ts';

/** Published when a node's stream opens, with {node_id, replica_id, connected_at (ms)}: another replica still holding an older stream of it closes that one. */
export const NODE_CONNECTED_CHANNEL = 'edge:node-connected';

/** Told to agents in Welcome (traffic reports are accepted and not stored yet). */
export const TRAFFIC_REPORT_INTERVAL_MS = 60_000;
/** How long an agent has to send Hello after its stream opens. */
export const HELLO_TIMEOUT_MS = 10 * SECOND;
/** Bound on each database or token check an opening stream waits for. */
const OPENING_TIMEOUT_MS = 10 * SECOND;
/** How long a revocation is remembered for streams still opening: longer than a stream may take from its token's check to its registration. */
const REVOKED_MEMORY_MS = HELLO_TIMEOUT_MS + 3 * OPENING_TIMEOUT_MS;
/** A node silent for this many heartbeat intervals is offline. */
export const SILENT_INTERVALS = 3;
/** Messages an agent may send before its stream is registered (Hello and little else). */
const MAX_EARLY_MESSAGES = 64;
/** How long a prefetch job waits for a node that can take it; then it fails, naming why for each URL. */
export const PREFETCH_TARGET_WAIT_MS = HOUR;
/** At most this many origin probes are taken from one heartbeat. */
const MAX_PROBES_PER_HEARTBEAT = 1_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const CONTROL_ALL = /[\u0000-\u001f\u007f-\u009f]/g;

/** An agent's free text (errors, reasons) made safe to store and show: no control characters, bounded. */
export function agentText(text: string, max = 2_000): string {
  const clean = text.replace(CONTROL_ALL, ' ').trim();
  return clean.length > max ? `${clean.slice(0, max - 1)}…` : clean;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const safeNumber = (value: bigint): number | null => (value > MAX_SAFE ? null : Number(value));
const msDate = (ms: bigint): Date | null => {
  if (ms <= 0n || ms > MAX_SAFE) return null;
  const date = new Date(Number(ms));
  return isStorableDate(date) ? date : null;
};

/** Why a Hello cannot register a node (the field and the rule), or null. */
export function helloProblem(hello: Hello): string | null {
  if (!UUID.test(hello.nodeId)) return 'node_id must be a UUID';
  if (!hello.hostname || hello.hostname.length > 253 || CONTROL.test(hello.hostname) || /\s/.test(hello.hostname)) return 'hostname must be 1..253 characters without spaces or control characters';
  if (!hello.region || hello.region.length > 64 || CONTROL.test(hello.region)) return 'region must be 1..64 characters without control characters';
  if (hello.agentVersion.length > 64 || CONTROL.test(hello.agentVersion)) return 'agent_version must be at most 64 characters without control characters';
  if (safeNumber(hello.configVersion) === null) return 'config_version is out of range';
  if (safeNumber(hello.purgeSequence) === null) return 'purge_sequence is out of range';
  return null;
}

const PURGE_TYPES = new Set(['path', 'wildcard', 'tag', 'all']);
const strings = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** The purge an announcement carries (cdn/announcements.ts), checked; null when it carries none or it is malformed (then it is read from the database). */
export function announcedPurge(value: unknown): (PurgeRow & { sequence: number }) | null {
  if (!value || typeof value !== 'object') return null;
  const p = value as Record<string, unknown>;
  if (typeof p.id !== 'string' || !UUID.test(p.id) || typeof p.distribution_id !== 'string' || !UUID.test(p.distribution_id)) return null;
  if (!Number.isSafeInteger(p.sequence) || (p.sequence as number) <= 0 || !PURGE_TYPES.has(p.purge_type as string) || !strings(p.paths) || !strings(p.tags)) return null;
  return { id: p.id, sequence: p.sequence as number, distribution_id: p.distribution_id, purge_type: p.purge_type as PurgeRow['purge_type'], paths: p.paths, tags: p.tags };
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

export class ChannelHub {
  readonly replicaId = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  readonly #services: EdgeServices;
  readonly #log: Logger;
  readonly #streams = new Map<string, AgentStream>();
  readonly #byToken = new Map<string, Set<AgentStream>>();
  /** Agent tokens revoked lately (ms): a stream verified before the revocation but registered after it is refused. */
  readonly #revokedAt = new Map<string, number>();
  readonly #feed: PurgeFeed;
  readonly #config: ConfigPusher;
  readonly #writer: ChannelWriter;
  /** Prefetch jobs this replica has handed out: job id → when. */
  readonly #dispatched = new Map<string, number>();
  readonly #unsubscribe: (() => Promise<void> | void)[] = [];
  #tick: NodeJS.Timeout | null = null;
  #polling: Promise<void> | null = null;
  /** Resolves once every subscription is in place (tests wait for it before announcing work). */
  subscribed: Promise<void> = Promise.resolve();
  #lastConnectMs = 0;
  #closing = false;

  constructor(services: EdgeServices) {
    this.#services = services;
    this.#log = services.log.child({ component: 'edge-channel' });
    const em = () => services.db.orm.em.fork() as EntityManager;
    this.#feed = new PurgeFeed(em);
    this.#config = new ConfigPusher(() => this.#source, this.#log);
    this.#writer = new ChannelWriter({
      em, clock: services.clock, log: this.#log, replicaId: this.replicaId,
      hooks: {
        configOrFleetChanged: async (em) => {
          const source = this.#source;
          if (source) await reconcileDeployments(em, source, services.clock.now());
        },
      },
    });
  }

  // The two seams are read when used: the services that provide them may start after the channel, and tests replace them.
  get #source(): ConfigSource | undefined {
    return (this.#services as Partial<EdgeServices>).edgeConfig;
  }

  get #tokens(): AgentTokenVerifier | undefined {
    return (this.#services as Partial<EdgeServices>).edgeAgentTokens;
  }

  get #em(): EntityManager {
    return this.#services.db.orm.em.fork() as EntityManager;
  }

  get #now(): Date {
    return this.#services.clock.now();
  }

  /** The streams held now (tests and diagnostics). */
  get streamCount(): number {
    return this.#streams.size;
  }

  /**
   * Subscribes and starts the tick. Nothing here waits for PostgreSQL or Redis (the control plane starts,
   * and reports its readiness, while they are down): the subscriptions complete when Redis answers, and
   * the purge feed and the active version are read by the first fan-out or tick.
   */
  start(): void {
    void this.#safely('purge feed', () => this.#feed.load());
    void this.#safely('reading the active configuration', () => this.#config.refresh());
    const { store } = this.#services;
    const pending: Promise<unknown>[] = [];
    const on = (channel: string, handler: (message: Record<string, unknown>) => void) => {
      pending.push(store.subscribe(channel, (raw) => {
        let message: Record<string, unknown>;
        try {
          message = JSON.parse(raw);
        } catch {
          return;
        }
        if (message && typeof message === 'object') handler(message);
      }).then((unsubscribe) => {
        if (this.#closing) void unsubscribe();
        else this.#unsubscribe.push(unsubscribe);
      }, (error: unknown) => this.#closing || this.#log.error({ err: error, channel }, 'edge channel: subscribing failed')));
    };
    on(PURGE_SUBMITTED_CHANNEL, (m) => this.#purgeAnnounced(m));
    on(PREFETCH_SUBMITTED_CHANNEL, (m) => typeof m.job_id === 'string' && UUID.test(m.job_id) && void this.#safely('prefetch fan-out', () => this.#dispatchPrefetch(m.job_id as string)));
    on(CONFIG_PUBLISHED_CHANNEL, () => void this.#safely('configuration push', () => this.#pushConfig()));
    on(AGENT_TOKEN_REVOKED_CHANNEL, (m) => typeof m.id === 'string' && this.#revoke(m.id));
    on(NODE_CONNECTED_CHANNEL, (m) => this.#connectedElsewhere(m));
    this.subscribed = Promise.all(pending).then(() => {});
    // Messages published while the subscription was down are lost: catch up when it is back.
    let wasLive = true;
    this.#unsubscribe.push(store.onSubscriptionState((live) => {
      if (live && !wasLive) {
        void this.#safely('re-checking agent tokens', () => this.recheckTokens());
        void this.poll();
      }
      wasLive = live;
    }));
    const interval = this.#services.config.EDGE_HEARTBEAT_INTERVAL_MS;
    this.#tick = setInterval(() => this.#polling || void this.poll(), interval);
    this.#tick.unref();
  }

  async #safely(what: string, work: () => Promise<unknown>): Promise<void> {
    try {
      await work();
    } catch (error) {
      if (!this.#closing) this.#log.error({ err: error }, `edge channel: ${what} failed`);
    }
  }

  /**
   * The periodic catch-up of every replica: silent nodes, purges, the active version and prefetch jobs it
   * may have missed. One runs at a time (a call during one waits for it, then runs again: tests rely on it).
   */
  async poll(): Promise<void> {
    while (this.#polling) await this.#polling;
    if (this.#closing) return;
    this.#polling = (async () => {
      await this.#safely('sweeping silent nodes', () => this.sweep());
      await this.#safely('purge fan-out', () => this.#fanOutPurges());
      await this.#safely('configuration push', () => this.#pushConfig());
      await this.#safely('prefetch poll', () => this.#pollPrefetch());
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
    const rows = await this.#em.getConnection().execute<{ id: string }[]>(
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
    const silentSince = new Date(now.getTime() - SILENT_INTERVALS * this.#services.config.EDGE_HEARTBEAT_INTERVAL_MS);
    const gone = await sweepSilentNodes(this.#em, silentSince, now);
    if (gone.length) {
      this.#log.info({ nodes: gone.length }, 'edge nodes marked offline: no heartbeat');
      this.#writer.nodesWentOffline(gone);
    }
    return gone;
  }

  /** Writes buffered acknowledgements and heartbeats now (tests; shutdown). */
  flush(): Promise<void> {
    return this.#writer.flush();
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
      const verifier = this.#tokens;
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
      const problem = helloProblem(first.message.value);
      if (problem) throw new StreamRefused(GrpcStatus.INVALID_ARGUMENT, `Hello: ${problem}`);
      stream = await withTimeout(this.#register(call, first.message.value, verified.id), OPENING_TIMEOUT_MS,
        () => new StreamRefused(GrpcStatus.UNAVAILABLE, 'registering the node timed out'));
      if (ended) return this.#gone(stream);
      // A revocation announced between the token's check and now found no stream of it to close: this one closes now.
      if ((this.#revokedAt.get(verified.id) ?? -Infinity) >= verifying) return stream.end(GrpcStatus.UNAUTHENTICATED, 'agent token revoked');
      // From here messages are handled as they come (acks of the pushes below included).
      const queued = early!;
      early = null;
      for (const message of queued) this.#onMessage(stream, message);
      await this.#open(stream, first.message.value.cacheEmpty, first.message.value.acceptsCacheReset);
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

  /** Upserts the node as online on this replica and takes over from an older stream of it here. */
  async #register(call: AgentCall, hello: Hello, tokenId: string): Promise<AgentStream> {
    const nodeId = hello.nodeId.toLowerCase();
    const connectedAt = this.#connectTime();
    const now = this.#now;
    const [row] = await this.#em.execute<{ failed_config_version: string | null }[]>(
      `insert into cdn_edge_node (id, hostname, region, status, agent_version, config_version, failed_config_version, config_error, purge_sequence,
         last_seen_at, connected_at, replica_id, agent_token_id, cache_objects, cache_bytes, created_at, updated_at)
       values (?, ?, ?, 'online', ?, ?, null, null, ?, ?, ?, ?, ?, 0, 0, ?, ?)
       on conflict (id) do update set hostname = excluded.hostname, region = excluded.region, status = 'online', agent_version = excluded.agent_version,
         config_version = excluded.config_version, purge_sequence = excluded.purge_sequence, last_seen_at = excluded.last_seen_at,
         connected_at = excluded.connected_at, replica_id = excluded.replica_id, agent_token_id = excluded.agent_token_id, updated_at = excluded.updated_at
       returning failed_config_version::text`,
      [nodeId, hello.hostname, hello.region, hello.agentVersion, Number(hello.configVersion), Number(hello.purgeSequence),
        now, connectedAt, this.replicaId, tokenId, now, now],
    );
    const stream = new AgentStream({ call, nodeId, tokenId, connectedAt, hostname: hello.hostname });
    stream.config.applied = Number(hello.configVersion);
    stream.config.failed = Number(row?.failed_config_version ?? 0);
    stream.purge.pushed = Number(hello.purgeSequence);
    const older = this.#streams.get(nodeId);
    if (older) {
      this.#forget(older);
      older.end(GrpcStatus.ABORTED, 'replaced by a newer stream of the same node');
    }
    this.#streams.set(nodeId, stream);
    let byToken = this.#byToken.get(tokenId);
    if (!byToken) this.#byToken.set(tokenId, (byToken = new Set()));
    byToken.add(stream);
    this.#services.store.publish(NODE_CONNECTED_CHANNEL, JSON.stringify({ node_id: nodeId, replica_id: this.replicaId, connected_at: connectedAt.getTime() }))
      .catch(() => {});
    this.#writer.fleetChanged();
    this.#log.info({ node_id: nodeId, hostname: hello.hostname, region: hello.region, config_version: stream.config.applied, purge_sequence: stream.purge.pushed }, 'edge node connected');
    return stream;
  }

  /**
   * Welcome, then the configuration the agent lacks, then the purges after its own (only those still open when
   * its cache is empty, or when it missed too many and is told to drop its cache: it has no use for the
   * finished ones), then live.
   */
  async #open(stream: AgentStream, cacheEmpty: boolean, acceptsReset: boolean): Promise<void> {
    if (!this.#config.target) await this.#config.refresh();
    const opening = await withTimeout(this.#feed.opening(stream.purge.pushed, cacheEmpty, acceptsReset), OPENING_TIMEOUT_MS,
      () => new StreamRefused(GrpcStatus.UNAVAILABLE, 'reading the purges to send timed out'));
    if (stream.closed) return;
    if (opening.reset) {
      this.#log.info({ node_id: stream.nodeId, purge_sequence: stream.purge.pushed, latest: opening.latest }, 'edge node missed too many purges to replay: told to drop its cache');
    }
    stream.write(encodeResponse(create(ConnectResponseSchema, {
      message: {
        case: 'welcome',
        value: {
          nodeId: stream.nodeId, heartbeatIntervalMs: this.#services.config.EDGE_HEARTBEAT_INTERVAL_MS, trafficReportIntervalMs: TRAFFIC_REPORT_INTERVAL_MS,
          purgeSequence: BigInt(opening.latest), configVersion: BigInt(this.#config.target?.version ?? 0), resetCache: opening.reset,
        },
      },
    })));
    stream.welcomed = true;
    stream.purge.pushed = Math.max(stream.purge.pushed, opening.start);
    await this.#config.sync(stream);
    for (const purge of opening.purges) {
      if (purge.sequence <= stream.purge.pushed) continue;
      if (!stream.write(purge.bytes)) return;
      stream.purge.pushed = purge.sequence;
    }
    stream.live = true;
    await this.#syncPurges(stream);
    await this.#resendPrefetch(stream);
  }

  /**
   * The prefetch jobs still awaiting this node's answer (sent on an earlier stream, or handed out while
   * this one was opening): sent again, so a reconnect does not leave a job waiting for an answer that
   * no stream would accept. Fetching a URL twice is harmless.
   */
  async #resendPrefetch(stream: AgentStream): Promise<void> {
    for (const job of await openJobsFor(this.#em, stream.nodeId)) {
      if (stream.closed) return;
      if (stream.prefetch.has(job.jobId)) continue;
      stream.prefetch.set(job.jobId, new Set(job.urls));
      stream.write(job.bytes);
    }
  }

  /** Writes to the stream every purge after the last one it got, in order: from memory when the feed reaches back, else from the database. */
  async #syncPurges(stream: AgentStream): Promise<void> {
    const state = stream.purge;
    if (state.syncing) {
      state.again = true;
      return;
    }
    state.syncing = true;
    try {
      do {
        state.again = false;
        for (;;) {
          if (stream.closed) return;
          const recent = this.#feed.after(state.pushed);
          const batch = recent ?? await this.#feed.page(state.pushed);
          for (const purge of batch) {
            if (purge.sequence <= state.pushed) continue;
            if (!stream.write(purge.bytes)) return;
            state.pushed = purge.sequence;
          }
          if (recent || !batch.length) break;
        }
      } while (state.again);
    } finally {
      state.syncing = false;
    }
  }

  #forget(stream: AgentStream): void {
    if (this.#streams.get(stream.nodeId) === stream) this.#streams.delete(stream.nodeId);
    const byToken = this.#byToken.get(stream.tokenId);
    byToken?.delete(stream);
    if (byToken?.size === 0) this.#byToken.delete(stream.tokenId);
  }

  /** The stream ended (either side, or the connection): the node is offline unless it has reconnected since (the write is guarded by connected_at). */
  #gone(stream: AgentStream): void {
    stream.closed = true;
    this.#forget(stream);
    this.#writer.node(stream, { status: 'offline' }, true);
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

  #connectedElsewhere(message: Record<string, unknown>): void {
    if (message.replica_id === this.replicaId || typeof message.node_id !== 'string' || typeof message.connected_at !== 'number') return;
    const stream = this.#streams.get(message.node_id);
    if (stream && stream.connectedAt.getTime() < message.connected_at) stream.end(GrpcStatus.ABORTED, 'the node connected to another control-plane replica');
  }

  // ---- what agents send ----------------------------------------------------

  #onMessage(stream: AgentStream, message: ConnectRequest): void {
    if (stream.closed) return;
    switch (message.message.case) {
      case 'ack': return this.#onAck(stream, message.message.value);
      case 'heartbeat': return this.#onHeartbeat(stream, message.message.value);
      case 'trafficReport': return; // Accepted and dropped until traffic analytics store them (nothing is buffered).
      case 'hello': return stream.end(GrpcStatus.INVALID_ARGUMENT, 'Hello may be sent once per stream');
      default: return;
    }
  }

  #onAck(stream: AgentStream, ack: Ack): void {
    const version = safeNumber(ack.version);
    if (version === null) return;
    switch (ack.kind) {
      case AckKind.CONFIG: {
        const outcome = this.#config.answer(stream, { version, nonce: ack.nonce, ok: ack.ok, error: ack.error });
        if (!outcome) return;
        if (outcome.applied !== undefined) this.#writer.node(stream, { config_version: outcome.applied, clear_error: true }, true);
        if (outcome.refused) {
          const error = agentText(outcome.refused.error) || 'refused without a reason';
          this.#writer.node(stream, { failed_config_version: outcome.refused.version, config_error: error }, true);
          this.#log.warn({ node_id: stream.nodeId, version: outcome.refused.version, error }, 'edge node refused a configuration version');
        }
        void this.#safely('configuration push', () => this.#config.sync(stream));
        return;
      }
      case AckKind.PURGE: {
        // Only for a purge this stream was sent (its sequence); the purge id is checked against it when stored.
        if (!UUID.test(ack.id) || version <= 0 || version > stream.purge.pushed) return;
        // Acks are stored in one statement per flush; the node's purge_sequence rides with its heartbeat-rate writes.
        this.#writer.purgeAck({ purge_id: ack.id.toLowerCase(), sequence: version, node_id: stream.nodeId, ok: ack.ok, error: ack.ok ? null : agentText(ack.error) || 'failed' });
        if (ack.ok) this.#writer.purgeApplied(stream, version);
        return;
      }
      case AckKind.PREFETCH: {
        const jobId = ack.id.toLowerCase();
        const urls = stream.prefetch.get(jobId);
        if (!urls) return;
        stream.prefetch.delete(jobId);
        const seen = new Set<string>();
        const failedUrls = ack.failedUrls.filter((f) => urls.has(f.url) && !seen.has(f.url) && seen.add(f.url))
          .map((f) => ({ url: f.url, reason: agentText(f.reason, 300) || 'failed' }));
        const error = !ack.ok && !failedUrls.length ? agentText(ack.error, 300) || 'failed' : null;
        this.#writer.prefetchAnswer({
          job_id: jobId, node_id: stream.nodeId, fetched: error ? 0 : urls.size - failedUrls.length, failed: error ? urls.size : failedUrls.length,
          failed_urls: failedUrls, error, acked_at: this.#now,
        });
        return;
      }
      default: return;
    }
  }

  #onHeartbeat(stream: AgentStream, heartbeat: Heartbeat): void {
    const now = this.#now;
    const draining = heartbeat.status === 'draining';
    const changed = draining !== stream.draining;
    stream.draining = draining;
    const purges = safeNumber(heartbeat.purgeSequence);
    // The applied configuration version comes from acks alone (as in xDS); the heartbeat's copy is informational.
    this.#writer.node(stream, {
      last_seen_at: now,
      status: draining ? 'draining' : 'online',
      purge_sequence: purges !== null && purges <= stream.purge.pushed ? purges : null,
      cache_objects: safeNumber(heartbeat.cacheObjects) ?? Number.MAX_SAFE_INTEGER,
      cache_bytes: safeNumber(heartbeat.cacheBytes) ?? Number.MAX_SAFE_INTEGER,
    }, changed);
    for (const probe of heartbeat.origins.slice(0, MAX_PROBES_PER_HEARTBEAT)) {
      if (!UUID.test(probe.originId)) continue;
      this.#writer.originProbe({
        origin_id: probe.originId.toLowerCase(),
        node_id: stream.nodeId,
        status: (HEALTH_STATUSES as readonly string[]).includes(probe.status) ? probe.status as HealthStatus : 'unknown',
        latency_ms: Math.min(probe.latencyMs, 2_147_483_647),
        last_success_at: msDate(probe.lastSuccessAtMs),
        last_failure_at: msDate(probe.lastFailureAtMs),
        failure_reason: agentText(probe.failureReason, 500) || null,
        consecutive_failures: Math.min(probe.consecutiveFailures, 2_147_483_647),
        checked_at: msDate(probe.checkedAtMs) ?? now,
      });
    }
  }

  // ---- live fan-out ---------------------------------------------------------

  /**
   * A purge was stored (here or on another replica). Announced with its content and next in sequence, it
   * is pushed at once, in this call, without reading the database; otherwise the feed reads what it lacks.
   */
  #purgeAnnounced(message: Record<string, unknown>): void {
    const row = announcedPurge(message.purge);
    const added = row && Number(message.sequence) === row.sequence ? this.#feed.offer(row) : null;
    if (added) {
      if (added.length) this.#pushPurges(added);
      return;
    }
    void this.#safely('purge fan-out', () => this.#fanOutPurges());
  }

  async #fanOutPurges(): Promise<void> {
    const added = await this.#feed.load();
    if (added.length) this.#pushPurges(added);
  }

  /** Writes the purges each live stream lacks: from memory in this call, or (a stream far behind, or one mid-catch-up) through #syncPurges. */
  #pushPurges(added: readonly EncodedPurge[]): void {
    const first = added[0]!.sequence;
    const last = added.at(-1)!.sequence;
    let written = 0;
    for (const stream of this.#streams.values()) {
      if (!stream.live) continue;
      if (stream.purge.syncing) void this.#safely('purge fan-out', () => this.#syncPurges(stream));
      else if (stream.purge.pushed === first - 1) this.#pushAll(stream, added); // the usual case: up to date until these
      else if (!this.#pushRecent(stream)) void this.#safely('purge fan-out', () => this.#syncPurges(stream));
      if (stream.purge.pushed === last) written++;
    }
    // Their acks are written the moment the streams written to have all answered (channel-writer.ts).
    for (const purge of added) this.#writer.expectAcks(purge.id, written);
  }

  #pushAll(stream: AgentStream, purges: readonly EncodedPurge[]): void {
    for (const purge of purges) {
      if (!stream.write(purge.bytes)) return;
      stream.purge.pushed = purge.sequence;
    }
  }

  /** Writes the purges after the stream's last from the feed's memory; false when the feed does not reach back that far. */
  #pushRecent(stream: AgentStream): boolean {
    const recent = this.#feed.after(stream.purge.pushed);
    if (!recent) return false;
    this.#pushAll(stream, recent);
    return true;
  }

  async #pushConfig(): Promise<void> {
    await this.#config.refresh();
    for (const stream of this.#streams.values()) if (stream.welcomed) void this.#safely('configuration push', () => this.#config.sync(stream));
  }

  async #dispatchPrefetch(jobId: string): Promise<void> {
    if (this.#dispatched.has(jobId)) return;
    this.#dispatched.set(jobId, Date.now());
    const now = this.#now;
    let dispatch;
    try {
      dispatch = await prepareDispatch(this.#em, this.#source, jobId, now);
    } catch (error) {
      this.#dispatched.delete(jobId); // the next poll tries again
      throw error;
    }
    if (!dispatch) return;
    // No node could take it yet (none online holds the endpoint): it waits, and the poll hands it out again.
    if (!dispatch.targets.size) {
      this.#dispatched.delete(jobId);
      return;
    }
    const urls = new Set(dispatch.urls);
    for (const nodeId of dispatch.targets) {
      const stream = this.#streams.get(nodeId);
      if (!stream?.welcomed) continue;
      stream.prefetch.set(dispatch.jobId, urls);
      stream.write(dispatch.bytes);
    }
  }

  /** Hands out the open jobs this replica has not (jobs submitted within the wait); fails the jobs no node could take within it. */
  async #pollPrefetch(): Promise<void> {
    const cutoff = Date.now() - 2 * PREFETCH_TARGET_WAIT_MS;
    for (const [id, at] of this.#dispatched) if (at < cutoff) this.#dispatched.delete(id);
    const now = this.#now;
    const waitStart = new Date(now.getTime() - PREFETCH_TARGET_WAIT_MS);
    const open = await this.#em.execute<{ id: string }[]>(`select id from cdn_prefetch_job where status in ('pending', 'in_progress') and created_at > ?`, [waitStart]);
    for (const { id } of open) if (!this.#dispatched.has(id)) await this.#dispatchPrefetch(id);
    const untaken = await this.#em.execute<{ id: string }[]>(
      `select j.id from cdn_prefetch_job j where j.status = 'pending' and j.created_at <= ?
         and not exists (select 1 from cdn_prefetch_result r where r.job_id = j.id) limit 100`,
      [waitStart],
    );
    if (untaken.length) await evaluatePrefetchJobs(this.#em, untaken.map((j) => j.id), now);
  }

  /** Ends every stream (agents reconnect to another replica) and writes what is buffered. */
  async close(): Promise<void> {
    this.#closing = true;
    if (this.#tick) clearInterval(this.#tick);
    const bound = (work: Promise<unknown>, what: string) =>
      withTimeout(work, this.#services.config.SHUTDOWN_TIMEOUT_MS, () => new Error(`${what} timed out`)).catch((error: unknown) => {
        this.#log.warn({ err: error }, `edge channel shutdown: ${what} failed`);
      });
    await bound(Promise.all(this.#unsubscribe.splice(0).map((unsubscribe) => unsubscribe())), 'unsubscribing');
    for (const stream of [...this.#streams.values()]) stream.end(GrpcStatus.UNAVAILABLE, 'control plane shutting down');
    await bound(this.#writer.close(), 'writing what agents acknowledged');
  }
}
