// EdgeAgent: one agent process put together, and what the control-stream
// client drives (control/controlled-agent.ts, which it implements). Its parts
// do the work: the configuration in force (control/configuration.ts), the
// cache with its purge sequence and prefetch (cache/), the request path
// (proxy/), the listeners and /metrics (tls/listeners.ts); the agent wires them
// together, reports health and closes them in order.
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import type { ConfigSnapshot } from '../../shared/src/config/snapshot.ts';
import { ConfigStore } from './control/config-store.ts';
import type { StateKey } from './control/sealing.ts';
import { AgentConfiguration, type PreparedConfig } from './control/configuration.ts';
import type { ConfigPushResult, ControlledAgent, HealthReport, TokenRefusal } from './control/controlled-agent.ts';
import type { ConfigPush, ConfigSource } from './control/resource-set.ts';
import { LogDrains } from './logs/drains.ts';
import { createMetrics, type AgentMetrics } from './metrics/prometheus.ts';
import { TrafficCounters, type TrafficRollup } from './metrics/traffic.ts';
import type { TrustedProxy } from './policy/client-address.ts';
import {
  CacheStore, Prefetcher, PurgeState, type CacheWhenDisconnected, type Clock, type NodeFillLock, type ObjectStore, type PrefetchResult,
  type PurgeCommand, type PurgeResult, type PurgeStateSnapshot,
} from './cache/index.ts';
import { HealthProber } from './proxy/health.ts';
import { OriginPools } from './proxy/origin-client.ts';
import { Proxy } from './proxy/proxy.ts';
import type { RoutingTable } from './proxy/routing.ts';
import { CertificateTable, type DefaultCertificate } from './tls/certificates.ts';
import { Listeners, type ListenOptions } from './tls/listeners.ts';
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
  /** The wall clock of the cache and the request path (default the system's): tests move it instead of sleeping. */
  clock?: Clock;
}

export const DEFAULT_REQUEST_HEADERS_TIMEOUT_MS = 20_000;
export const DEFAULT_REQUEST_TIMEOUT_MS = 300_000;
export const DEFAULT_REQUEST_BODY_IDLE_TIMEOUT_MS = 30_000;
export const DEFAULT_UPLOAD_CONNECTIONS_PER_ORIGIN = 32;

export { ConfigRefusedError, type ConfigPushResult, type HealthReport } from './control/controlled-agent.ts';
export { fullPushOf, type PreparedConfig } from './control/configuration.ts';
export type { ListenOptions } from './tls/listeners.ts';
export type { CacheWhenDisconnected, PrefetchResult, PurgeCommand, PurgeType } from './cache/index.ts';

export class EdgeAgent implements ControlledAgent {
  readonly logger: Logger;
  readonly store: CacheStore;
  readonly traffic = new TrafficCounters();
  readonly metrics: AgentMetrics;
  readonly proxy: Proxy;
  /** Origin shield: the shield map, the hop keys, the latency to other regions' shields (proxy/shield-directory.ts). */
  readonly shield: ShieldDirectory;
  /** Connections to shield nodes (apart from the origins': they follow the shield map, not the configuration). */
  private readonly shieldPools: OriginPools;
  /** The log drains of the configuration in force. */
  readonly logs: LogDrains;
  private readonly pools: OriginPools;
  private readonly prober: HealthProber;
  private readonly configStore: ConfigStore | null;
  /** The configuration in force and how a new one is put in force (control/configuration.ts). */
  private readonly config: AgentConfiguration;
  private readonly healthProbes: boolean;
  /** The control plane refuses the agent's token (controlPlaneRefused): /healthz says so, with 503. */
  private tokenRefusal: TokenRefusal | null = null;
  /** The purge sequence applied and what it does to the cache (cache/purge-state.ts). */
  readonly purges: PurgeState;
  private readonly prefetcher: Prefetcher;
  /** Which certificate and TLS settings each name is served with (rebuilt with each configuration). */
  readonly certificates = new CertificateTable({ http2: true });
  /** The plaintext, HTTPS, private and metrics listeners (tls/listeners.ts). */
  private readonly listeners: Listeners;
  /** HTTPS_PUBLIC_PORT: the port redirects to HTTPS name (default: the HTTPS listener's). */
  private readonly httpsPublicPort: number | null;

  constructor(options: EdgeAgentOptions) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    const persist = options.persist ?? true;
    this.configStore = persist
      ? new ConfigStore(options.dataDir, (err) => this.logger.error({ err: err.message }, 'persisting the configuration failed; the previous one stays on disk'), options.stateKey ?? null, options.keepConfigBodies ?? false)
      : null;
    this.healthProbes = options.healthProbes ?? true;
    const requestHeadersTimeoutMs = options.requestHeadersTimeoutMs ?? DEFAULT_REQUEST_HEADERS_TIMEOUT_MS;
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    if (requestTimeoutMs > 0 && requestHeadersTimeoutMs > requestTimeoutMs) {
      throw new RangeError('requestHeadersTimeoutMs must not exceed requestTimeoutMs');
    }
    this.httpsPublicPort = options.httpsPublicPort ?? null;
    this.shieldPools = new OriginPools({ connectionsPerOrigin: 64, clock: options.clock });
    this.pools = new OriginPools({ uploadConnectionsPerOrigin: options.uploadConnectionsPerOrigin ?? DEFAULT_UPLOAD_CONNECTIONS_PER_ORIGIN, clock: options.clock });
    this.config = new AgentConfiguration({
      store: this.configStore, logger: this.logger, maxEndpoints: options.maxEndpoints ?? 0, keepBodies: options.keepConfigBodies ?? false,
      installed: (snapshot, table) => this.configInstalled(snapshot, table),
    });
    this.store = new CacheStore({ memoryBytes: options.memoryBytes, node: options.nodeTier ?? null, clock: options.clock });
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
      configVersion: () => this.config.table.version,
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
      table: () => this.config.table,
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
        httpsPort: () => this.httpsPublicPort ?? this.listeners.httpsPort,
      },
      tls: this.certificates,
    });
    this.purges = new PurgeState({
      store: this.store, gate: this.proxy, logger: this.logger, cacheWhenDisconnected: options.cacheWhenDisconnected,
      endpoints: () => this.config.table.byId.keys(),
      persist: (sequence) => this.configStore?.savePurgeSequence(sequence),
    });
    this.prefetcher = new Prefetcher({
      hostnameOf: (endpointId) => this.config.table.byId.get(endpointId)?.snapshot.hostname,
      address: () => this.listeners.ownAddress,
    });
    this.listeners = new Listeners({
      handler: this.proxy.handle, certificates: this.certificates, logger: this.logger, requestHeadersTimeoutMs, requestTimeoutMs,
      onHandshakeFailure: (reason) => this.metrics.tlsHandshakeFailures.inc({ reason }),
    });
  }

  get configVersion(): number {
    return this.config.table.version;
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
    return this.config.snapshot;
  }

  /** The version to report to the control plane (Hello, heartbeats): 0 unless the configuration came from one. */
  get controlConfigVersion(): number {
    return this.config.controlVersion;
  }

  /** Where the configuration in force came from. */
  get configSource(): ConfigSource {
    return this.config.source;
  }

  /** Whether cache reads are suspended until missed purges are applied (see beginPurgeCatchUp). */
  get catchingUp(): boolean {
    return this.purges.catchingUp;
  }

  /** The compiled routing table in force (replaced whole by each applyConfig). */
  get routing(): RoutingTable {
    return this.config.table;
  }

  /** Restores the last applied configuration and purge sequence from the data directory. Returns the version restored (0: none). */
  restore(): number {
    return this.config.restore((sequence) => this.purges.restore(sequence));
  }

  /**
   * Validates and compiles the snapshot, then swaps the routing tables in one assignment (AgentConfiguration.apply);
   * a bad snapshot throws ConfigRefusedError and changes nothing.
   */
  applyConfig(input: unknown, version?: number, opts: { persist?: boolean } = {}): void {
    this.config.apply(input, version, opts);
  }

  /** applyConfig's first half (checks, parses and compiles, changing nothing); commitConfigPush puts it in force. */
  prepareConfig(input: unknown, version?: number): PreparedConfig {
    return this.config.prepare(input, version);
  }

  /**
   * Applies a push from the control plane (full, or a delta on the version held); throws ConfigRefusedError and
   * changes nothing when it cannot. The configuration is live when this returns; it reaches the disk shortly after.
   */
  applyConfigPush(push: ConfigPush): ConfigPushResult {
    return this.config.commitPush(this.config.preparePush(push));
  }

  /** applyConfigPush's first half (AgentConfiguration.preparePush): an agent with workers prepares in every worker first. */
  prepareConfigPush(push: ConfigPush): PreparedConfig {
    return this.config.preparePush(push);
  }

  /** Puts a prepared push in force (it must have been prepared on the configuration still held). */
  commitConfigPush(prepared: PreparedConfig): ConfigPushResult {
    return this.config.commitPush(prepared);
  }

  /** The configuration held as one full push (what a new worker is started from); null without the bodies. */
  fullConfigPush(): ConfigPush | null {
    return this.config.fullPush();
  }

  /** Resolves once the configuration in force is on disk (writes are asynchronous and coalesced). */
  async persisted(): Promise<void> {
    await this.config.persisted();
  }

  /** What follows a configuration put in force: log drains, certificates, origin pools and health probes. */
  private configInstalled(snapshot: ConfigSnapshot, table: RoutingTable): void {
    this.logs.apply(snapshot.log_drains);
    this.certificates.build(snapshot);
    for (const problem of this.certificates.problems) this.logger.warn({ problem }, 'certificate not served');
    this.pools.retain(table.origins.values());
    if (this.healthProbes) this.prober.sync(table);
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
      configVersion: this.config.table.version,
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

  /** The plaintext listener (tls/listeners.ts); shared: a worker's, one of several processes on the same port. */
  listen(port: number, host = '0.0.0.0', options: ListenOptions = {}): Promise<AddressInfo> {
    return this.listeners.listen(port, host, options);
  }

  /** The HTTPS listener: certificates by SNI, each name with its endpoint's TLS settings; HTTP/1.1 and HTTP/2. */
  listenHttps(port: number, host = '0.0.0.0', options: ListenOptions = {}): Promise<AddressInfo> {
    return this.listeners.listenHttps(port, host, options);
  }

  /** A loopback listener of this process alone (prefetches go through it). */
  listenPrivate(): Promise<AddressInfo> {
    return this.listeners.listenPrivate();
  }

  /**
   * /metrics and /healthz. An agent with workers gives its own (workers/primary.ts): the metrics of every
   * process aggregated, and its health with the workers'.
   */
  listenMetrics(port: number, host = '0.0.0.0', views: { metrics?: () => Promise<string>; health?: () => Record<string, unknown> } = {}): Promise<AddressInfo> {
    const registry = this.metrics.registry;
    return this.listeners.listenMetrics(port, host, {
      metrics: views.metrics ?? (() => registry.metrics()), contentType: registry.contentType, health: views.health ?? (() => this.healthView()),
    });
  }

  /** New TLS session ticket keys for the HTTPS listener (the primary rotates the workers' shared keys). */
  setTicketKeys(keys: Buffer): void {
    this.listeners.setTicketKeys(keys);
  }

  /** Replaces the default certificate (TLS_CERT_FILE / TLS_KEY_FILE): the next handshakes use it, open connections keep theirs. */
  setDefaultCertificate(cert: DefaultCertificate | null): void {
    this.certificates.setDefault(cert);
    this.listeners.defaultCertificateChanged();
  }

  /** Stops accepting, lets in-flight requests finish (up to timeoutMs), then closes origin pools. */
  async close(timeoutMs = 10_000): Promise<void> {
    this.prober.stop();
    await this.listeners.close(timeoutMs);
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
