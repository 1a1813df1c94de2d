// EdgeAgent: the agent process's state, and what the control-stream client
// drives (control/controlled-agent.ts, which it implements: applyConfigPush /
// applyPurge / prefetch / healthReport / takeTrafficRollups and the purge
// sequence); the HTTP data plane and /metrics hang off the same object.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import { parseConfigSnapshot, type ConfigSnapshot } from '../../shared/src/config/snapshot.ts';
import { ConfigStore } from './control/config-store.ts';
import { SealError, type StateKey } from './control/sealing.ts';
import {
  ConfigRefusedError, type ConfigPushResult, type ControlledAgent, type HealthReport, type TokenRefusal,
} from './control/controlled-agent.ts';
import { ConfigPushError, ResourceSet, type ConfigPush, type ConfigSource, type StagedConfig } from './control/resource-set.ts';
import { LogDrains } from './logs/drains.ts';
import { createMetrics, type AgentMetrics } from './metrics/prometheus.ts';
import { TrafficCounters, type TrafficRollup } from './metrics/traffic.ts';
import type { TrustedProxy } from './policy/client-address.ts';
import {
  CacheStore, Prefetcher, PurgeState, type CacheWhenDisconnected, type NodeFillLock, type ObjectStore, type PrefetchResult,
  type PurgeCommand, type PurgeResult, type PurgeStateSnapshot,
} from './cache/index.ts';
import { HealthProber } from './proxy/health.ts';
import { OriginPools } from './proxy/origin-client.ts';
import { Proxy } from './proxy/proxy.ts';
import { compileRoutingTable, type RoutingTable } from './proxy/routing.ts';
import { CertificateTable, type DefaultCertificate } from './tls/certificates.ts';
import { Http2Listener } from './tls/http2-server.ts';
import { HttpsListener } from './tls/listener.ts';
import { ShieldDirectory, type ShieldMapUpdate } from './proxy/shield-directory.ts';

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
  /** What the cache does while the agent is cut off from the control plane (CACHE_WHEN_DISCONNECTED; cache/purge-state.ts). */
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

export { ConfigRefusedError, type ConfigPushResult, type HealthReport } from './control/controlled-agent.ts';
export type { CacheWhenDisconnected, PrefetchResult, PurgeCommand, PurgeType } from './cache/index.ts';

const EMPTY_TABLE: RoutingTable = { version: 0, byHost: new Map(), byId: new Map(), origins: new Map() };

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
  private readonly keepConfigBodies: boolean;
  /** The control plane refuses the agent's token (controlPlaneRefused): /healthz says so, with 503. */
  private tokenRefusal: TokenRefusal | null = null;
  private table: RoutingTable = EMPTY_TABLE;
  private snapshot: ConfigSnapshot | null = null;
  private readonly resources = new ResourceSet();
  /** The purge sequence applied and what it does to the cache (cache/purge-state.ts). */
  readonly purges: PurgeState;
  private readonly prefetcher: Prefetcher;
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

  constructor(options: EdgeAgentOptions) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    const persist = options.persist ?? true;
    this.configStore = persist
      ? new ConfigStore(options.dataDir, (err) => this.logger.error({ err: err.message }, 'persisting the configuration failed; the previous one stays on disk'), options.stateKey ?? null, options.keepConfigBodies ?? false)
      : null;
    this.healthProbes = options.healthProbes ?? true;
    this.maxEndpoints = options.maxEndpoints ?? 0;
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
      purgeSequence: () => this.purges.sequence,
      originHealth: () => this.prober.report().map((o) => ({ originId: o.originId, consecutiveFailures: o.consecutiveFailures, healthy: o.status === 'healthy' })),
      cutOff: () => this.purges.cutOff,
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
    this.purges = new PurgeState({
      store: this.store, gate: this.proxy, logger: this.logger, cacheWhenDisconnected: options.cacheWhenDisconnected,
      endpoints: () => this.table.byId.keys(),
      persist: this.configStore === null ? undefined : (sequence) => this.configStore?.savePurgeSequence(sequence),
    });
    this.prefetcher = new Prefetcher({
      hostnameOf: (endpointId) => this.table.byId.get(endpointId)?.snapshot.hostname,
      address: () => this.privateServer !== null ? this.privateServer.address() as AddressInfo
        : this.plaintextListening ? this.httpServer?.address() as AddressInfo | null : null,
    });
  }

  get configVersion(): number {
    return this.table.version;
  }

  get appliedPurgeSequence(): number {
    return this.purges.sequence;
  }

  /** Nothing is cached: no purge made so far can concern this agent (said in Hello as cache_empty). */
  get cacheEmpty(): boolean {
    return this.purges.cacheEmpty;
  }

  /** The node tier holds `objects` from before this start: nothing is served from it until the Welcome (PurgeState.holdUntilWelcome). */
  holdCacheUntilWelcome(objects: number): void {
    this.purges.holdUntilWelcome(objects);
  }

  /** Every purge up to `sequence` is moot: the cache is dropped (PurgeState.startFrom). */
  startFromPurge(sequence: number, reset = false): void {
    this.purges.startFrom(sequence, reset);
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
    return this.purges.catchingUp;
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
    this.purges.restore(state.purgeSequence);
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

  /** Welcome's purge sequence: behind it, nothing is served from the cache until the missed purges are applied. */
  beginPurgeCatchUp(target: number): boolean {
    return this.purges.beginCatchUp(target);
  }

  /** Cut off from the control plane for longer than the client's bound, or back (PurgeState.controlPlaneLost). */
  controlPlaneLost(lost: boolean): void {
    this.purges.controlPlaneLost(lost);
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
    return this.purges.cutOff;
  }

  /** Records a purge the agent cannot apply (unknown type) as seen, so it does not hold the catch-up forever. */
  skipPurge(sequence: number, reason: string): void {
    this.purges.skip(sequence, reason);
  }

  /** Applies one purge (PurgeState.apply: a promise with a node tier, settled once the purge is applied there too). */
  applyPurge(cmd: PurgeCommand): PurgeResult | Promise<PurgeResult> {
    return this.purges.apply(cmd);
  }

  /** Warms the cache through the agent's own listener (cache/prefetch.ts). */
  prefetch(endpointId: string, urls: readonly string[]): Promise<PrefetchResult> {
    return this.prefetcher.prefetch(endpointId, urls);
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
      purgeSequence: this.purges.sequence,
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
      control_plane_cut_off: this.purges.cutOff,
      control_plane_token_refused: this.tokenRefusal,
    };
  }

  /** A worker takes its primary's purge state on start (PurgeState.adopt). */
  adoptPurgeState(state: PurgeStateSnapshot): void {
    this.purges.adopt(state);
  }

  /** The purge state a new worker adopts (adoptPurgeState). */
  get purgeState(): PurgeStateSnapshot {
    return this.purges.snapshot;
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
    await this.prefetcher.close();
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
