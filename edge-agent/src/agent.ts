// EdgeAgent: the agent process's state, and what the control-stream client
// drives (control/controlled-agent.ts, which it implements: applyConfigPush /
// applyPurge / prefetch / healthReport / takeTrafficRollups and the purge
// sequence); the HTTP data plane and /metrics hang off the same object.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import { Agent as UndiciAgent } from 'undici';
import { parseConfigSnapshot, type ConfigSnapshot } from '../../shared/src/config/snapshot.ts';
import { normalizePath } from '../../shared/src/match/path.ts';
import { ConfigStore } from './control/config-store.ts';
import { SealError, type StateKey } from './control/sealing.ts';
import {
  ConfigRefusedError, type ConfigPushResult, type ControlledAgent, type HealthReport, type PrefetchResult, type PurgeCommand, type PurgeResult, type TokenRefusal,
} from './control/controlled-agent.ts';
import { ConfigPushError, ResourceSet, type ConfigPush, type ConfigSource, type StagedConfig } from './control/resource-set.ts';
import { LogDrains } from './logs/drains.ts';
import { createMetrics, type AgentMetrics } from './metrics/prometheus.ts';
import { TrafficCounters, type TrafficRollup } from './metrics/traffic.ts';
import type { TrustedProxy } from './policy/client-address.ts';
import type { ObjectStore, PurgeTarget } from './cache/index.ts';
import { CacheStore } from './proxy/cache-store.ts';
import { HealthProber } from './proxy/health.ts';
import { OriginPools } from './proxy/origin-client.ts';
import type { NodeFillLock } from './proxy/node-fills.ts';
import { Proxy } from './proxy/proxy.ts';
import { compileRoutingTable, type RoutingTable } from './proxy/routing.ts';
import { CertificateTable, type DefaultCertificate } from './tls/certificates.ts';
import { Http2Listener } from './tls/http2-server.ts';
import { HttpsListener } from './tls/listener.ts';
import { ShieldDirectory, type ShieldMapUpdate } from './proxy/shield-directory.ts';

/** The catch-up target while held at start: not known until the Welcome (holdCacheUntilWelcome). */
const UNKNOWN_TARGET = Number.MAX_SAFE_INTEGER;

/** Slices of 1 MiB, as nginx's `slice 1m` and ATS's slice plugin default. */
export const DEFAULT_SLICE_BYTES = 1024 * 1024;
/** Full answers above 8 MiB are kept in slices: playlists, thumbnails and most segments stay whole objects. */
export const DEFAULT_SLICE_THRESHOLD_BYTES = 8 * 1024 * 1024;

export interface EdgeAgentOptions {
  dataDir: string;
  memoryBytes: number;
  /** The node-wide cache tier shared by the node's workers (cache/index.ts), opened by the process that owns it; the agent closes it. */
  nodeTier?: ObjectStore | null;
  /** With workers sharing the node tier: the lock that lets one of them fill a key at a time (workers/fill-locks.ts). */
  fillLock?: NodeFillLock | null;
  maxObjectBytes: number;
  /**
   * Whether this process reports the node tier's objects and bytes (default true); false for all workers but one,
   * which share it (each would count it again).
   */
  reportsNodeTier?: boolean;
  /** Slice size of large objects (0: none kept in slices; default DEFAULT_SLICE_BYTES). */
  sliceBytes?: number;
  /** Full answers above this size (or above maxObjectBytes) are kept in slices (default DEFAULT_SLICE_THRESHOLD_BYTES). */
  sliceThresholdBytes?: number;
  region?: string;
  defaultEndpointId?: string | null;
  logger?: Logger;
  /** Write applied snapshots and purge sequences to dataDir (default true). */
  persist?: boolean;
  /** Seals the configuration written to dataDir (control/sealing.ts; the agent process derives it from AGENT_TOKEN). */
  stateKey?: StateKey | null;
  /** This node's id (Hello's): it signs the shield hops it sends. */
  nodeId?: string;
  /** Measure the latency to other regions' shield nodes (default: as healthProbes; the process holding the control stream does). */
  shieldProbes?: boolean;
  /** Keep every resource body in memory once written (an agent with workers starts new ones from them: fullConfigPush). */
  keepConfigBodies?: boolean;
  /** Start origin health probes (default true). */
  healthProbes?: boolean;
  /** Time a viewer has to send the request head (default 20 s). */
  requestHeadersTimeoutMs?: number;
  /** Time a viewer has to send the whole request, body included (default 300 s; 0: no limit). */
  requestTimeoutMs?: number;
  /** Longest pause between chunks of a viewer's body while it is forwarded (default 30 s; 0: no limit). */
  requestBodyIdleTimeoutMs?: number;
  /** Connections per origin for forwarding requests with a body (default 32); cache misses use their own 256. */
  uploadConnectionsPerOrigin?: number;
  /** Most endpoints this node accepts (0: no limit): a larger configuration is refused whole and the previous one keeps serving. */
  maxEndpoints?: number;
  /** A proxy in front of the agent whose client-address header request policies believe (TRUST_PROXY_HEADER); default none. */
  trustedProxy?: TrustedProxy | null;
  /**
   * What the cache does while the agent is cut off from the control plane (controlPlaneLost; CACHE_WHEN_DISCONNECTED):
   * `revalidate` (default) every cached object with the origin before serving it, so no purge made meanwhile can be
   * missed; `serve` it as it is (availability first: purges made meanwhile are applied when the agent is back).
   */
  cacheWhenDisconnected?: CacheWhenDisconnected;
  /** The node's name in access records and log objects (default the region's cache name). */
  nodeName?: string;
  /** Log drains: the buffer all the drains share (LOG_DRAIN_BUFFER_BYTES), and overrides of the batch interval and the longest retry wait. */
  logDrains?: { bufferBytes?: number; flushIntervalMs?: number; retryMaxMs?: number };
  /**
   * The port `http_to_https_redirect` and `http_to_https` redirect rules send viewers to (omitted from the URL
   * when 443); default: the HTTPS listener's port once it listens (HTTPS_PUBLIC_PORT overrides it).
   */
  httpsPublicPort?: number;
}

export type CacheWhenDisconnected = 'revalidate' | 'serve';

export interface ListenOptions {
  /** One of several worker processes listening on this port (SO_REUSEPORT, each with a socket of its own). */
  shared?: boolean;
  /** TLS session ticket keys (48 bytes) shared by the workers, so a session resumes whichever worker takes the connection. */
  ticketKeys?: Buffer;
}

const sharedPort = (options: ListenOptions) => (options.shared ? { reusePort: true, exclusive: true } : {});

/** A push checked and compiled, not yet in force (prepareConfigPush). */
export interface PreparedConfig {
  readonly staged: StagedConfig;
  readonly table: RoutingTable;
  /** The version it was prepared on. */
  readonly base: number;
}

export const DEFAULT_REQUEST_HEADERS_TIMEOUT_MS = 20_000;
export const DEFAULT_REQUEST_TIMEOUT_MS = 300_000;
export const DEFAULT_REQUEST_BODY_IDLE_TIMEOUT_MS = 30_000;
export const DEFAULT_UPLOAD_CONNECTIONS_PER_ORIGIN = 32;

export { ConfigRefusedError, type ConfigPushResult, type HealthReport, type PrefetchResult, type PurgeCommand, type PurgeType } from './control/controlled-agent.ts';

const EMPTY_TABLE: RoutingTable = { version: 0, byHost: new Map(), byId: new Map(), origins: new Map() };
const PREFETCH_CONCURRENCY = 4;

export class EdgeAgent implements ControlledAgent {
  readonly logger: Logger;
  readonly store: CacheStore;
  readonly traffic = new TrafficCounters();
  readonly metrics: AgentMetrics;
  readonly proxy: Proxy;
  /** Origin shield: the shield map, the hop keys, the latency to other regions' shields (proxy/shield-directory.ts). */
  readonly shield: ShieldDirectory;
  /** Connections to shield nodes (apart from the origins': they follow the shield map, not the configuration). */
  private readonly shieldPools = new OriginPools({ connectionsPerOrigin: 64 });
  /** The log drains of the configuration in force. */
  readonly logs: LogDrains;
  private readonly pools: OriginPools;
  private readonly requestHeadersTimeoutMs: number;
  private readonly requestTimeoutMs: number;
  private readonly prober: HealthProber;
  private readonly configStore: ConfigStore | null;
  private readonly healthProbes: boolean;
  private readonly maxEndpoints: number;
  private readonly cacheWhenDisconnected: CacheWhenDisconnected;
  private readonly keepConfigBodies: boolean;
  /** Cut off from the control plane for longer than the control client's bound (controlPlaneLost). */
  private cutOff = false;
  /** The control plane refuses the agent's token (controlPlaneRefused): /healthz says so, with 503. */
  private tokenRefusal: TokenRefusal | null = null;
  private table: RoutingTable = EMPTY_TABLE;
  private snapshot: ConfigSnapshot | null = null;
  private readonly resources = new ResourceSet();
  private purgeSequence = 0;
  /** The purge sequence the control plane announced at the last Welcome, while the agent is behind it. */
  private purgeCatchUpTarget = 0;
  /** The node tier held objects at start and no Welcome has come yet (holdCacheUntilWelcome). */
  private heldFromBefore = false;
  private httpServer: Server | null = null;
  /** Whether the plaintext listener listens (the HTTP server may serve only TLS connections). */
  private plaintextListening = false;
  private httpsListener: HttpsListener | null = null;
  /** listenPrivate's listener (prefetches go through it when there is one). */
  private privateServer: Server | null = null;
  private metricsServer: Server | null = null;
  /** Which certificate and TLS settings each name is served with (rebuilt with each configuration). */
  readonly certificates = new CertificateTable({ http2: true });
  /** HTTP/2 connections of the HTTPS listener (made with it). */
  private http2: Http2Listener | null = null;
  private httpsPublicPort: number | null;
  private selfClient: UndiciAgent | null = null;

  constructor(options: EdgeAgentOptions) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    const persist = options.persist ?? true;
    this.configStore = persist
      ? new ConfigStore(options.dataDir, (err) => this.logger.error({ err: err.message }, 'persisting the configuration failed; the previous one stays on disk'), options.stateKey ?? null, options.keepConfigBodies ?? false)
      : null;
    this.healthProbes = options.healthProbes ?? true;
    this.maxEndpoints = options.maxEndpoints ?? 0;
    this.cacheWhenDisconnected = options.cacheWhenDisconnected ?? 'revalidate';
    this.keepConfigBodies = options.keepConfigBodies ?? false;
    this.requestHeadersTimeoutMs = options.requestHeadersTimeoutMs ?? DEFAULT_REQUEST_HEADERS_TIMEOUT_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    if (this.requestTimeoutMs > 0 && this.requestHeadersTimeoutMs > this.requestTimeoutMs) {
      throw new RangeError('requestHeadersTimeoutMs must not exceed requestTimeoutMs');
    }
    this.httpsPublicPort = options.httpsPublicPort ?? null;
    this.pools = new OriginPools({ uploadConnectionsPerOrigin: options.uploadConnectionsPerOrigin ?? DEFAULT_UPLOAD_CONNECTIONS_PER_ORIGIN });
    this.store = new CacheStore({ memoryBytes: options.memoryBytes, node: options.nodeTier ?? null });
    this.prober = new HealthProber(this.pools);
    this.shield = new ShieldDirectory({ region: options.region ?? 'local', nodeId: options.nodeId ?? 'standalone', probe: options.shieldProbes ?? this.healthProbes });
    const reportsNodeTier = options.reportsNodeTier ?? true;
    this.metrics = createMetrics({
      traffic: this.traffic,
      // The node tier is counted by one of the node's processes (reportsNodeTier), its workers' memory tiers by each.
      cache: () => reportsNodeTier || !this.store.hasNodeTier
        ? { objects: this.store.objectCount, memoryBytes: this.store.memoryBytes, diskBytes: this.store.diskBytes }
        : { objects: 0, memoryBytes: this.store.memoryBytes, diskBytes: 0 },
      cacheActivity: () => {
        const { memory, node } = this.store.counts;
        return {
          memory: { ...memory, evictions: this.store.memoryEvictions },
          node: this.store.hasNodeTier ? { ...node, evictions: this.store.nodeEvictions } : null,
          sliceFills: this.proxy.sliceFills,
          fillTurns: this.proxy.fillTurns,
        };
      },
      configVersion: () => this.table.version,
      purgeSequence: () => this.purgeSequence,
      originHealth: () => this.prober.report().map((o) => ({ originId: o.originId, consecutiveFailures: o.consecutiveFailures, healthy: o.status === 'healthy' })),
      cutOff: () => this.cutOff,
      defaultCertificateExpiry: () => {
        const cert = this.certificates.default;
        return cert ? Date.parse(cert.x509.validTo) : null;
      },
    });
    this.logs = new LogDrains({ nodeName: options.nodeName ?? `edge-${options.region ?? 'local'}`, logger: this.logger, ...options.logDrains });
    this.logs.registerMetrics(this.metrics.registry);
    this.proxy = new Proxy({
      fillLock: options.fillLock ?? null,
      shield: { directory: this.shield, pools: this.shieldPools },
      logs: this.logs,
      table: () => this.table,
      store: this.store,
      pools: this.pools,
      traffic: this.traffic,
      originLatency: this.metrics.originLatency,
      policyDenials: this.metrics.policyDenials,
      logger: this.logger,
      options: {
        defaultEndpointId: options.defaultEndpointId ?? null,
        maxObjectBytes: options.maxObjectBytes,
        slicing: { sliceBytes: options.sliceBytes ?? DEFAULT_SLICE_BYTES, thresholdBytes: options.sliceThresholdBytes ?? DEFAULT_SLICE_THRESHOLD_BYTES },
        cacheName: `edge-${options.region ?? 'local'}`,
        bodyIdleTimeoutMs: options.requestBodyIdleTimeoutMs ?? DEFAULT_REQUEST_BODY_IDLE_TIMEOUT_MS,
        trustedProxy: options.trustedProxy ?? null,
        httpsPort: () => this.httpsPublicPort,
      },
      tls: this.certificates,
    });
  }

  get configVersion(): number {
    return this.table.version;
  }

  get appliedPurgeSequence(): number {
    return this.purgeSequence;
  }

  /** Nothing is cached: no purge made so far can concern this agent (said in Hello as cache_empty). */
  get cacheEmpty(): boolean {
    return this.store.objectCount === 0 && !this.heldFromBefore;
  }

  /**
   * At start, with a control plane: the node tier holds objects from before this start (`objects`), and purges
   * may have been made while the agent was down. Nothing is answered from the cache until the control plane's
   * Welcome says which purges were missed and they are applied (beginPurgeCatchUp); the Hello does not say the
   * cache is empty. Cut off from the control plane meanwhile, CACHE_WHEN_DISCONNECTED decides (controlPlaneLost).
   */
  holdCacheUntilWelcome(objects: number): void {
    if (objects === 0) return;
    this.heldFromBefore = true;
    this.purgeCatchUpTarget = UNKNOWN_TARGET;
    this.proxy.cacheReadsSuspended = true;
    this.logger.info({ objects, purge_sequence: this.purgeSequence }, 'the node cache holds objects from before this start: not serving them until the control plane says which purges were missed');
  }

  /**
   * Called on Welcome when the Hello said the cache was empty, or when the control plane says the agent missed
   * too many purges to replay (`reset`): every purge up to `sequence` is moot. The whole cache is dropped (for
   * an empty cache, what was cached between the Hello and now, fetched before purges the control plane counted
   * in `sequence`), then `sequence` is taken as applied; the open purges that follow are acknowledged as replays.
   */
  startFromPurge(sequence: number, reset = false): void {
    if (sequence <= this.purgeSequence) return;
    this.store.dropEverything();
    this.logger.info({ purge_sequence: sequence, previous: this.purgeSequence },
      reset ? 'missed too many purges to replay: cache dropped, starting from the platform\'s latest purge' : 'cache empty at connect: starting from the platform\'s latest purge');
    this.notePurgeSequence(sequence);
  }

  get currentSnapshot(): ConfigSnapshot | null {
    return this.snapshot;
  }

  /** The version to report to the control plane (Hello, heartbeats): 0 unless the configuration came from one. */
  get controlConfigVersion(): number {
    return this.resources.controlVersion;
  }

  /** Where the configuration in force came from. */
  get configSource(): ConfigSource {
    return this.resources.source;
  }

  /** Whether cache reads are suspended until missed purges are applied (see beginPurgeCatchUp). */
  get catchingUp(): boolean {
    return this.proxy.cacheReadsSuspended;
  }

  /** The compiled routing table in force (replaced whole by each applyConfig). */
  get routing(): RoutingTable {
    return this.table;
  }

  /** Restores the last applied configuration and purge sequence from the data directory. Returns the version restored (0: none). */
  restore(): number {
    let state;
    try {
      state = this.configStore?.load();
    } catch (err) {
      if (err instanceof SealError) this.logger.warn({ err: err.message }, 'the persisted configuration cannot be opened with this agent token; starting without it until the control plane sends one');
      else this.logger.error({ err: (err as Error).message }, 'persisted configuration is damaged; starting without one');
      return 0;
    }
    if (!state) return 0;
    this.purgeSequence = state.purgeSequence;
    try {
      if (state.config !== null) {
        const { config } = state;
        const staged = this.resources.stage({
          version: config.version, full: true, baseVersion: 0, resources: config.resources,
          removed: [], digest: config.digest, resourceCount: config.resources.length,
        });
        // The same limit as for a push or a file: a node restarted smaller does not serve more than it is sized for.
        if (this.exceedsCapacity(staged.snapshot)) {
          this.logger.error({ version: config.version, endpoints: staged.snapshot.endpoints.length, max_endpoints: this.maxEndpoints },
            `the persisted configuration holds more endpoints than this node's limit (MAX_ENDPOINTS): starting without it until the control plane sends one that fits`);
          return 0;
        }
        // The bodies are on disk already (unless found in clear: then they are written again, sealed).
        if (!config.needsReseal && !this.keepConfigBodies) for (const r of staged.resources.values()) r.body = null;
        this.install({ ...staged, source: config.source }, compileRoutingTable(staged.snapshot), config.needsReseal);
        if (config.needsReseal) this.logger.info({ version: config.version }, 'the persisted configuration was stored in clear: sealing it');
        return config.version;
      }
      if (state.legacy !== null) {
        this.applyConfig(state.legacy.snapshot, state.legacy.version);
        return state.legacy.version;
      }
    } catch (err) {
      this.logger.error({ err: (err as Error).message }, 'persisted configuration is invalid; starting without one');
    }
    return 0;
  }

  /**
   * Validates and compiles the snapshot, then swaps the routing tables in one
   * assignment: requests already running finish on the old table, new ones see
   * the new one. A bad snapshot throws ConfigRefusedError and changes nothing.
   */
  applyConfig(input: unknown, version?: number, opts: { persist?: boolean } = {}): void {
    const prepared = this.prepareConfig(input, version);
    this.install(prepared.staged, prepared.table, opts.persist !== false);
    this.logger.info({ version: prepared.staged.version, endpoints: prepared.staged.snapshot.endpoints.length }, 'configuration applied');
  }

  /** applyConfig's first half (checks, parses and compiles, changing nothing; throws ConfigRefusedError); commitConfigPush puts it in force. */
  prepareConfig(input: unknown, version?: number): PreparedConfig {
    let snapshot: ConfigSnapshot;
    let table: RoutingTable;
    try {
      snapshot = parseConfigSnapshot(input);
      if (version !== undefined && version !== snapshot.version) snapshot = { ...snapshot, version };
      this.checkCapacity(snapshot);
      table = compileRoutingTable(snapshot);
    } catch (err) {
      const detail = (err as { issues?: { path: PropertyKey[]; message: string }[] }).issues?.[0];
      const message = detail ? `${detail.path.join('.')}: ${detail.message}` : (err as Error).message;
      throw new ConfigRefusedError(`configuration refused: ${message}`, { cause: err });
    }
    return { staged: this.resources.stageSnapshot(snapshot, 'file'), table, base: this.resources.version };
  }

  /**
   * Applies a push from the control plane (full, or a delta on the version held):
   * checks it, parses only its new or changed resources, compiles only the
   * endpoints that changed, and swaps the tables as applyConfig does. Throws
   * ConfigRefusedError (message "base_mismatch: ..." when the base is not the
   * one held or the result does not match the digest) and changes nothing.
   * The configuration is live when this returns; it reaches the disk shortly after.
   */
  applyConfigPush(push: ConfigPush): ConfigPushResult {
    return this.commitConfigPush(this.prepareConfigPush(push));
  }

  /**
   * applyConfigPush's first half: checks, parses and compiles the push against the configuration held, changing
   * nothing (throws ConfigRefusedError). An agent with workers prepares a push in every worker before any commits it.
   */
  prepareConfigPush(push: ConfigPush): PreparedConfig {
    try {
      const staged = this.resources.stage(push);
      this.checkCapacity(staged.snapshot);
      return { staged, table: compileRoutingTable(staged.snapshot, staged.nonEndpointChanged ? undefined : this.table), base: this.resources.version };
    } catch (err) {
      const message = err instanceof ConfigPushError ? err.message : `configuration refused: ${(err as Error).message}`;
      throw new ConfigRefusedError(message, { cause: err });
    }
  }

  /** Puts a prepared push in force (it must have been prepared on the configuration still held). */
  commitConfigPush(prepared: PreparedConfig): ConfigPushResult {
    if (prepared.base !== this.resources.version) throw new ConfigRefusedError('configuration refused: prepared on another version');
    const { staged, table } = prepared;
    let compiled = 0;
    for (const e of table.byId.values()) if (this.table.byId.get(e.id) !== e) compiled++;
    this.install(staged, table, true);
    return { version: staged.version, changed: staged.changed, compiled };
  }

  /**
   * The configuration held as one full push (what a new worker is started from). Needs the bodies, which an agent
   * keeps only with keepConfigBodies (an agent with workers); null without them.
   */
  fullConfigPush(): ConfigPush | null {
    return fullPushOf(this.resources);
  }

  /** A node sized for fewer endpoints than the configuration holds refuses it whole (and keeps serving the previous one). */
  private checkCapacity(snapshot: ConfigSnapshot): void {
    if (this.exceedsCapacity(snapshot)) {
      throw new Error(`${snapshot.endpoints.length} endpoints exceed this node's limit of ${this.maxEndpoints} (MAX_ENDPOINTS)`);
    }
  }

  private exceedsCapacity(snapshot: ConfigSnapshot): boolean {
    return this.maxEndpoints > 0 && snapshot.endpoints.length > this.maxEndpoints;
  }

  /** Resolves once the configuration in force is on disk (writes are asynchronous and coalesced). */
  async persisted(): Promise<void> {
    await this.configStore?.flush();
  }

  private install(staged: StagedConfig, table: RoutingTable, persist: boolean): void {
    this.table = table;
    this.snapshot = staged.snapshot;
    this.resources.commit(staged);
    this.logs.apply(staged.snapshot.log_drains);
    this.certificates.build(staged.snapshot);
    for (const problem of this.certificates.problems) this.logger.warn({ problem }, 'certificate not served');
    this.pools.retain(table.origins.values());
    if (this.healthProbes) this.prober.sync(table);
    if (persist && this.configStore !== null) {
      const set = this.resources;
      void this.configStore.saveConfig(() => ({ version: set.version, source: set.source, digest: set.digest.hex(), resources: set.resources.values() }));
    }
  }

  /**
   * Called on Welcome: when the control plane's purge sequence is ahead of the
   * one applied, purges were missed while away and they follow in order. Until
   * the agent has applied them, nothing is answered from the cache (requests go
   * to the origin as misses; what they fetch may be stored, it is newer than
   * any purge). Returns whether the agent is catching up.
   */
  beginPurgeCatchUp(target: number): boolean {
    this.heldFromBefore = false;
    if (target <= this.purgeSequence) {
      this.purgeCatchUpTarget = 0;
      if (this.proxy.cacheReadsSuspended) this.logger.info({ purge_sequence: this.purgeSequence }, 'purges caught up; serving from the cache again');
      this.proxy.cacheReadsSuspended = false;
      return false;
    }
    this.purgeCatchUpTarget = target;
    this.proxy.cacheReadsSuspended = true;
    this.logger.info({ purge_sequence: this.purgeSequence, target }, 'missed purges: not serving from the cache until they are applied');
    return true;
  }

  /**
   * The control client's word that the agent has been cut off from the control plane for longer than its bound
   * (`lost`), or is connected again. Purges made meanwhile cannot reach it: with CACHE_WHEN_DISCONNECTED=revalidate
   * every cached object is revalidated with the origin before it is served until it is back (then the missed
   * purges are applied before its cache answers alone again: beginPurgeCatchUp); with `serve` the cache serves
   * as it is.
   */
  controlPlaneLost(lost: boolean): void {
    if (lost === this.cutOff) return;
    this.cutOff = lost;
    if (lost && this.purgeCatchUpTarget === UNKNOWN_TARGET) {
      // Held since start for a Welcome that does not come: what the cache does now is CACHE_WHEN_DISCONNECTED's.
      this.purgeCatchUpTarget = 0;
      this.proxy.cacheReadsSuspended = false;
    }
    const revalidate = this.cacheWhenDisconnected === 'revalidate';
    this.proxy.revalidateAll = lost && revalidate;
    if (!lost) this.logger.info('the control plane is back: the cache serves again once missed purges are applied');
    else if (revalidate) this.logger.warn('cut off from the control plane: every cached object is revalidated with the origin before it is served, until it is back');
    else this.logger.warn('cut off from the control plane: the cache keeps serving; purges made meanwhile are applied when it is back (CACHE_WHEN_DISCONNECTED=serve)');
  }

  /**
   * The control client's word that the control plane refuses the agent's token, or welcomed it again (null). The
   * client logs it (once per run of refusals); the agent shows it on /healthz, which answers 503 meanwhile.
   */
  controlPlaneRefused(refusal: TokenRefusal | null): void {
    this.tokenRefusal = refusal;
  }

  /** Whether the agent is cut off from the control plane (controlPlaneLost). */
  get controlPlaneCutOff(): boolean {
    return this.cutOff;
  }

  /** Records a purge the agent cannot apply (unknown type) as seen, so it does not hold the catch-up forever. */
  skipPurge(sequence: number, reason: string): void {
    this.logger.warn({ sequence, reason }, 'purge not applied');
    this.notePurgeSequence(sequence);
  }

  private notePurgeSequence(sequence: number): void {
    if (sequence > this.purgeSequence) {
      this.purgeSequence = sequence;
      this.configStore?.savePurgeSequence(sequence);
    }
    if (this.proxy.cacheReadsSuspended && this.purgeSequence >= this.purgeCatchUpTarget) this.beginPurgeCatchUp(this.purgeCatchUpTarget);
  }

  /**
   * Applies one purge. Purges at or below the applied sequence are acknowledged without effect (replays after
   * reconnect). With a node tier, a promise: the purge is applied there too before it may be acknowledged.
   */
  applyPurge(cmd: PurgeCommand): PurgeResult | Promise<PurgeResult> {
    if (!this.store.hasNodeTier) return this.applyPurgeHere(cmd);
    const failures = this.store.nodePurgeFailures;
    const result = this.applyPurgeHere(cmd);
    return this.store.settled().then(() => {
      if (this.store.nodePurgeFailures > failures) throw new Error('the node cache tier could not apply the purge');
      return result;
    });
  }

  private applyPurgeHere(cmd: PurgeCommand): PurgeResult {
    if (cmd.sequence > 0 && cmd.sequence <= this.purgeSequence) return { applied: false, purged: 0 };
    const endpoints = cmd.endpoint_id ? [cmd.endpoint_id] : [...new Set([...this.table.byId.keys(), ...this.store.endpointIds()])];
    let purged = 0;
    for (const endpointId of endpoints) {
      if (cmd.soft === true) {
        for (const target of purgeTargets(cmd)) purged += this.store.softPurge(endpointId, target);
        continue;
      }
      switch (cmd.type) {
        case 'path':
          for (const p of cmd.paths ?? []) purged += this.store.purgePath(endpointId, pathOf(p));
          break;
        case 'tag':
          for (const t of cmd.tags ?? []) purged += this.store.purgeTag(endpointId, t);
          break;
        case 'wildcard':
          for (const p of cmd.paths ?? []) this.store.purgeWildcard(endpointId, pathOf(p));
          break;
        case 'all':
          this.store.purgeAll(endpointId);
          break;
        default:
          throw new Error(`unknown purge type ${String((cmd as { type: unknown }).type)}`);
      }
    }
    this.logger.info({ purge_id: cmd.purge_id, sequence: cmd.sequence, type: cmd.type, soft: cmd.soft === true, endpoint: cmd.endpoint_id || '*', purged }, 'purge applied');
    this.notePurgeSequence(cmd.sequence);
    return { applied: true, purged };
  }

  /**
   * Warms the cache by requesting each URL through the agent's own listener, so
   * prefetches follow exactly the viewer path (routing, rules, collapsing).
   * URLs may be absolute (their host is ignored) or paths.
   */
  async prefetch(endpointId: string, urls: readonly string[]): Promise<PrefetchResult> {
    const endpoint = this.table.byId.get(endpointId);
    const result: PrefetchResult = { fetched: 0, failed: 0, failed_urls: [] };
    const address = this.privateServer !== null ? this.privateServer.address() as AddressInfo
      : this.plaintextListening ? this.httpServer?.address() as AddressInfo | null : null;
    if (!endpoint || !address) {
      const reason = !endpoint ? 'unknown endpoint' : 'agent is not listening';
      return { fetched: 0, failed: urls.length, failed_urls: urls.map((url) => ({ url, reason })) };
    }
    this.selfClient ??= new UndiciAgent({ connections: PREFETCH_CONCURRENCY });
    const client = this.selfClient;
    const host = endpoint.snapshot.hostname;
    const origin = `http://${address.family === 'IPv6' ? '[::1]' : '127.0.0.1'}:${address.port}`;
    let next = 0;
    const worker = async () => {
      while (next < urls.length) {
        const url = urls[next++];
        let path: string;
        try {
          const u = new URL(url, `http://${host}`);
          path = u.pathname + u.search;
        } catch {
          result.failed++;
          result.failed_urls.push({ url, reason: 'invalid URL' });
          continue;
        }
        try {
          const res = await client.request({ origin, path, method: 'GET', headers: { host, 'user-agent': 'edge-agent-prefetch/1' } });
          await res.body.dump();
          if (res.statusCode < 400) result.fetched++;
          else {
            result.failed++;
            result.failed_urls.push({ url, reason: `status ${res.statusCode}` });
          }
        } catch (err) {
          result.failed++;
          result.failed_urls.push({ url, reason: (err as Error).message });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PREFETCH_CONCURRENCY, urls.length) }, worker));
    return result;
  }

  /** The shield map the control plane sent: misses of shielded endpoints go to these nodes, hops signed with its keys are trusted. */
  applyShieldMap(map: ShieldMapUpdate): void {
    this.shield.apply(map);
    this.shieldPools.retain(this.shield.origins);
    this.logger.info({ regions: map.regions.map((r) => `${r.region}:${r.nodes.length}`) }, 'shield map applied');
  }

  healthReport(): HealthReport {
    const origins = this.prober.report();
    return {
      shieldLatencies: this.shield.measured,
      shieldUnreachable: this.shield.unreachableRegions,
      status: origins.some((o) => o.status === 'unhealthy') ? 'degraded' : 'ok',
      configVersion: this.table.version,
      purgeSequence: this.purgeSequence,
      cacheObjects: this.store.objectCount,
      cacheBytes: this.store.memoryBytes + this.store.diskBytes,
      origins,
      logDrains: this.logs.states(),
    };
  }

  /**
   * What /healthz shows. `status` is `unauthorized` while the control plane refuses the agent's token (it then gets
   * no configuration or purges, and a node whose token was revoked is taken out of service: 503), else the report's.
   */
  healthView(report: HealthReport = this.healthReport()): Record<string, unknown> {
    return {
      status: this.tokenRefusal ? 'unauthorized' : report.status,
      config_version: report.configVersion, purge_sequence: report.purgeSequence, cache_objects: report.cacheObjects, cache_bytes: report.cacheBytes,
      control_plane_cut_off: this.cutOff,
      control_plane_token_refused: this.tokenRefusal,
    };
  }

  /**
   * A worker takes its primary's purge state on start: the purge sequence applied, the catch-up in progress
   * (nothing served from the cache until it is reached) and whether the agent is cut off.
   */
  adoptPurgeState(state: { purgeSequence: number; catchUpTarget: number; cutOff: boolean }): void {
    this.purgeSequence = state.purgeSequence;
    if (state.catchUpTarget > state.purgeSequence) this.beginPurgeCatchUp(state.catchUpTarget);
    this.controlPlaneLost(state.cutOff);
  }

  /** The purge state a new worker adopts (adoptPurgeState). */
  get purgeState(): { purgeSequence: number; catchUpTarget: number; cutOff: boolean } {
    return { purgeSequence: this.purgeSequence, catchUpTarget: this.proxy.cacheReadsSuspended ? this.purgeCatchUpTarget : 0, cutOff: this.cutOff };
  }

  /** Per-endpoint counts since the previous call (the control client calls this once a minute). */
  takeTrafficRollups(topN = 50): TrafficRollup[] {
    return this.traffic.takeRollups(topN);
  }

  /** The HTTP/1.1 server: the plaintext listener's, which also takes the TLS listener's HTTP/1.1 connections. */
  private ensureHttpServer(): Server {
    if (this.httpServer !== null) return this.httpServer;
    this.httpServer = this.newHttpServer();
    return this.httpServer;
  }

  private newHttpServer(): Server {
    const headersTimeout = this.requestHeadersTimeoutMs;
    const requestTimeout = this.requestTimeoutMs;
    // node:http checks both timeouts on an interval (30 s by default): a quarter of the shorter one keeps them close to their value.
    const shortest = Math.min(headersTimeout || Infinity, requestTimeout || Infinity);
    const connectionsCheckingInterval = Number.isFinite(shortest) ? Math.max(50, Math.min(30_000, Math.floor(shortest / 4))) : 30_000;
    const server = createServer({ keepAliveTimeout: 65_000, headersTimeout, requestTimeout, connectionsCheckingInterval, noDelay: true }, this.proxy.handle);
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      // As node:http's default, but ending the socket gracefully: never write into a response already under way.
      const inFlight = (socket as { _httpMessage?: ServerResponse | null })._httpMessage;
      if (socket.writable && (!inFlight || !inFlight.headersSent)) {
        const status = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
        socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`, () => socket.destroy());
      } else socket.destroy();
    });
    return server;
  }

  /**
   * A loopback listener of this process alone (a worker's: its public listeners share their port with the other
   * workers, so a request to them may reach another worker's cache). Prefetches go through it.
   */
  async listenPrivate(): Promise<AddressInfo> {
    const server = this.newHttpServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.privateServer = server;
    return server.address() as AddressInfo;
  }

  /** shared: a worker's listener, one of several processes on the same port (SO_REUSEPORT: the kernel spreads connections). */
  async listen(port: number, host = '0.0.0.0', options: ListenOptions = {}): Promise<AddressInfo> {
    const server = this.ensureHttpServer();
    const address = await this.dualStack(host, (h, extra) => new Promise<AddressInfo>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port, host: h, ...extra, ...sharedPort(options) }, () => {
        server.off('error', reject);
        resolve(server.address() as AddressInfo);
      });
    }));
    this.plaintextListening = true;
    return address;
  }

  /**
   * Listens on `host`; `::` is dual-stack (IPv6 and IPv4 on one socket, whatever the system's default), and
   * falls back to IPv4 alone on a host without IPv6.
   */
  private async dualStack(host: string, listen: (host: string, extra: { ipv6Only?: boolean }) => Promise<AddressInfo>): Promise<AddressInfo> {
    if (host !== '::') return listen(host, {});
    try {
      return await listen('::', { ipv6Only: false });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL') throw err;
      this.logger.warn({ err: (err as Error).message }, 'no IPv6 on this host: listening on IPv4 only');
      return listen('0.0.0.0', {});
    }
  }

  /**
   * The HTTPS listener (tls/listener.ts): certificates by SNI from the configuration in force and the default
   * certificate, each name with its endpoint's TLS settings; HTTP/1.1 through the same request path.
   */
  async listenHttps(port: number, host = '0.0.0.0', options: ListenOptions = {}): Promise<AddressInfo> {
    const listener = new HttpsListener({
      ticketKeys: options.ticketKeys,
      table: this.certificates,
      http1: this.ensureHttpServer(),
      http2: (this.http2 ??= new Http2Listener(this.proxy.handle)),
      handshakeTimeoutMs: this.requestHeadersTimeoutMs,
      logger: this.logger,
      onHandshakeFailure: (reason) => this.metrics.tlsHandshakeFailures.inc({ reason }),
    });
    const address = await this.dualStack(host, (h, extra) => listener.listen(port, h, { ...extra, ...sharedPort(options) }));
    this.httpsListener = listener;
    this.httpsPublicPort ??= address.port;
    return address;
  }

  /** New TLS session ticket keys for the HTTPS listener (the primary rotates the workers' shared keys). */
  setTicketKeys(keys: Buffer): void {
    this.httpsListener?.setTicketKeys(keys);
  }

  /** Replaces the default certificate (TLS_CERT_FILE / TLS_KEY_FILE): the next handshakes use it, open connections keep theirs. */
  setDefaultCertificate(cert: DefaultCertificate | null): void {
    this.certificates.setDefault(cert);
    this.httpsListener?.defaultCertificateChanged();
  }

  /**
   * /metrics and /healthz. An agent with workers gives its own (workers/primary.ts): the metrics of every
   * process aggregated, and its health with the workers'.
   */
  async listenMetrics(port: number, host = '0.0.0.0', views: { metrics?: () => Promise<string>; health?: () => Record<string, unknown> } = {}): Promise<AddressInfo> {
    const registry = this.metrics.registry;
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/metrics') {
        (views.metrics?.() ?? registry.metrics()).then(
          (text) => {
            res.writeHead(200, { 'content-type': registry.contentType });
            res.end(text);
          },
          (err: Error) => {
            res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(err.message);
          },
        );
      } else if (path === '/healthz') {
        const view = views.health?.() ?? this.healthView();
        res.writeHead(view.status === 'unauthorized' ? 503 : 200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify(view));
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found\n');
      }
    });
    this.metricsServer = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    return server.address() as AddressInfo;
  }

  /** Stops accepting, lets in-flight requests finish (up to timeoutMs), then closes origin pools. */
  async close(timeoutMs = 10_000): Promise<void> {
    this.prober.stop();
    await this.httpsListener?.close();
    const h2Closed = this.http2?.close(timeoutMs);
    const servers = [this.httpServer, this.privateServer, this.metricsServer].filter((s): s is Server => s !== null);
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => {
      const timer = setTimeout(() => s.closeAllConnections(), timeoutMs);
      timer.unref();
      // A keep-alive connection whose request finishes during shutdown turns idle
      // later: keep closing idle connections so close() does not wait for the timeout.
      const sweep = setInterval(() => s.closeIdleConnections(), 50);
      sweep.unref();
      s.close(() => {
        clearTimeout(timer);
        clearInterval(sweep);
        resolve();
      });
      s.closeIdleConnections();
    })));
    await h2Closed;
    await this.selfClient?.close().catch(() => {});
    // What the drains hold is sent within the same grace; what cannot be is lost with the process.
    await this.logs.flush(timeoutMs);
    this.logs.close();
    this.shield.stop();
    await this.pools.closeAll();
    await this.store.close();
    await this.shieldPools.closeAll();
    await this.configStore?.flush();
  }
}

/** A configuration held (or staged) as one full push; null when a body is no longer in memory. */
export function fullPushOf(set: { version: number; resources: ReadonlyMap<string, { key: string; version: number; body: Uint8Array | null; sha256: string }>; digest: { hex(): string } }): ConfigPush | null {
  const resources = [];
  for (const r of set.resources.values()) {
    if (r.body === null) return null;
    resources.push({ key: r.key, version: r.version, body: r.body, sha256: r.sha256 });
  }
  return { version: set.version, full: true, baseVersion: 0, resources, removed: [], digest: set.digest.hex(), resourceCount: resources.length };
}

/**
 * Purge paths may be given as full URLs; only the path counts (query variants
 * are purged with it), normalised as request paths are, so it names the stored
 * objects whatever spelling the purge used ("/%7Euser/a" is "/~user/a").
 */
/** What a purge command names, as the cache's purge targets. */
function purgeTargets(cmd: PurgeCommand): PurgeTarget[] {
  switch (cmd.type) {
    case 'path': return (cmd.paths ?? []).map((p) => ({ kind: 'path', path: pathOf(p) }));
    case 'wildcard': return (cmd.paths ?? []).map((p) => ({ kind: 'glob', pattern: pathOf(p) }));
    case 'tag': return (cmd.tags ?? []).map((tag) => ({ kind: 'tag', tag }));
    case 'all': return [{ kind: 'all' }];
  }
}

function pathOf(p: string): string {
  let path = p;
  if (/^https?:\/\//i.test(p)) {
    const u = URL.parse(p);
    if (u) path = u.pathname;
  } else {
    const q = p.indexOf('?');
    if (q !== -1) path = p.slice(0, q);
  }
  return normalizePath(path) ?? path;
}
