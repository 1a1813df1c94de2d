// The primary process of an agent with WORKERS > 1: it holds what there is one
// of per node (the control stream's agent state, the configuration persisted
// in DATA_DIR, origin health probes, /metrics and /healthz) in an EdgeAgent
// that serves no viewer, and runs the data plane in worker processes
// (workers/worker.ts, node:cluster), each listening on the agent's ports with a
// socket of its own (SO_REUSEPORT). It is what the control client drives
// (ControlledAgent):
// - a configuration push is prepared (checked, parsed, compiled) here, then in
//   every worker; only when all prepared it is committed in each, then here,
//   and the push is acknowledged: a worker that cannot apply it makes it a
//   nack and nothing changes anywhere;
// - a purge is acknowledged once every worker has applied it (a worker that
//   failed to makes it a nack), so no worker serves a purged object after the ack;
// - prefetches run in every worker (each has its own cache);
// - the workers' cache sizes, log-drain states and traffic are summed into
//   the node's heartbeat and rollups, and /metrics aggregates every process's
//   registry (prom-client's AggregatorRegistry).
// These operations run one at a time, in the order they came. A worker that
// dies is replaced (from the configuration and purge state in force, before it
// listens) while the others keep serving; a worker that does not answer in time
// is killed and replaced (its cache goes with it, so a purge it missed cannot
// be served). SIGTERM drains every worker.
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import client from 'prom-client';
import { fullPushOf, type EdgeAgent } from '../agent.ts';
import type { AgentConfig } from '../config.ts';
import {
  ConfigRefusedError, type ConfigPushResult, type ControlledAgent, type HealthReport, type PrefetchResult, type PurgeCommand, type PurgeResult, type TokenRefusal,
} from '../control/controlled-agent.ts';
import type { ConfigPush } from '../control/resource-set.ts';
import type { DrainState } from '../logs/drains.ts';
import type { TrafficRollup } from '../metrics/traffic.ts';
import type { ShieldMapUpdate } from '../proxy/shield-directory.ts';
import type { CertificatePair, DefaultCertificate } from '../tls/certificates.ts';
import { challengeSecret } from '../policy/challenge.ts';
import { FillLocks, type TurnNotice } from './fill-locks.ts';
import { mergeDrainStates, RollupAccumulator } from './merge.ts';
import type { FromWorker, ListeningPorts, ToWorker } from './protocol.ts';

const TIMEOUTS = { init: 60_000, prepare: 60_000, commit: 30_000, purge: 10_000, metrics: 5_000, prefetch: 15 * 60_000 };
/** Replacements of a worker that keeps dying wait longer each time (up to 30 s). */
const RESPAWN_BASE_MS = 250;
const RESPAWN_MAX_MS = 30_000;

class WorkerGone extends Error {}

interface Handle {
  index: number;
  worker: Worker;
  ready: boolean;
  pending: Map<number, { resolve: (value: unknown) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>;
  exited: Promise<void>;
  /** Its memory tier's objects and bytes. */
  cacheObjects: number;
  cacheBytes: number;
  /** What the node tier holds, as it last saw it (0 without one). */
  nodeObjects: number;
  nodeBytes: number;
  drains: DrainState[];
}

export interface WorkerPoolOptions {
  config: AgentConfig;
  /** The primary's agent: control state, persistence, probes; it keeps configuration bodies (keepConfigBodies). */
  agent: EdgeAgent;
  logger: Logger;
  /** The worker entry (workers/worker.ts) and the arguments it gets (the agent's own flags). */
  exec: string;
  args: string[];
}

/** How often the workers' shared session ticket keys are replaced. */
export const TICKET_KEY_ROTATION_MS = 3_600_000;

export class WorkerPool implements ControlledAgent {
  private readonly options: WorkerPoolOptions;
  private readonly agent: EdgeAgent;
  private readonly logger: Logger;
  private readonly handles = new Map<number, Handle>();
  /** Which worker fills which key (one origin fetch per object for the node). */
  private readonly fillLocks = new FillLocks();
  private readonly rollups = new RollupAccumulator();
  /** The workers' shared session ticket keys (a session resumes whichever worker takes it), rotated every TICKET_KEY_ROTATION_MS. */
  private ticketKeys = randomBytes(48);
  private ticketRotation: NodeJS.Timeout | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private nextId = 1;
  private ports: ListeningPorts;
  private certificate: CertificatePair | null = null;
  private stopping = false;
  /** Recent deaths per worker index (respawn backoff). */
  private readonly deaths = new Map<number, number[]>();

  constructor(options: WorkerPoolOptions) {
    this.options = options;
    this.agent = options.agent;
    this.logger = options.logger;
    const { config } = options;
    this.ports = { http: config.HTTP_PORT, https: config.HTTPS_PORT === 'off' ? null : config.HTTPS_PORT };
    cluster.setupPrimary({ exec: options.exec, args: options.args, serialization: 'advanced', silent: false });
    const pool = this;
    // Read by its collect function at each scrape.
    new client.Gauge({
      name: 'edge_workers', help: 'Data-plane worker processes, by state (running: listening; configured: WORKERS)', labelNames: ['state'] as const,
      registers: [this.agent.metrics.registry],
      collect() {
        this.set({ state: 'configured' }, config.WORKERS);
        this.set({ state: 'running' }, pool.running);
      },
    });
  }

  /** Workers listening now. */
  get running(): number {
    let n = 0;
    for (const h of this.handles.values()) if (h.ready) n++;
    return n;
  }

  /** The ports the workers listen on (known once the first listens). */
  get listening(): ListeningPorts {
    return this.ports;
  }

  /** Starts every worker, one after the other (the first fixes the ports when they are 0). */
  async start(): Promise<ListeningPorts> {
    this.ticketRotation ??= setInterval(() => this.rotateTicketKeys(), TICKET_KEY_ROTATION_MS).unref();
    for (let i = 0; i < this.options.config.WORKERS; i++) await this.serial(() => this.spawn(i));
    if (this.running === 0) throw new Error('no worker could start');
    return this.ports;
  }

  /** Runs operations one at a time, in order. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => {});
    return run;
  }

  private spawn(index: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    const worker = cluster.fork({ EDGE_WORKER_INDEX: String(index), EDGE_NODE_ID: this.agent.shield.nodeId });
    let exited!: () => void;
    const handle: Handle = {
      index, worker, ready: false, pending: new Map(), exited: new Promise((r) => (exited = r)), cacheObjects: 0, cacheBytes: 0, nodeObjects: 0, nodeBytes: 0, drains: [],
    };
    this.handles.set(index, handle);
    worker.on('message', (msg: FromWorker) => this.onMessage(handle, msg));
    worker.on('error', (err) => this.logger.debug({ worker: index, err: err.message }, 'worker channel error'));
    worker.once('exit', (code, signal) => {
      exited();
      handle.ready = false;
      for (const p of handle.pending.values()) {
        clearTimeout(p.timer);
        p.reject(new WorkerGone(`worker ${index} exited`));
      }
      handle.pending.clear();
      if (this.handles.get(index) === handle) {
        this.handles.delete(index);
        this.tell(this.fillLocks.workerGone(index));
      }
      if (this.stopping) return;
      this.logger.error({ worker: index, code, signal }, 'a worker exited; starting another');
      this.respawnLater(index);
    });
    const { agent } = this;
    return this.request<ListeningPorts>(handle, {
      t: 'init', id: 0, push: agent.fullConfigPush(), purge: agent.purgeState, certificate: this.certificate, ports: this.ports, ticketKeys: this.ticketKeys,
      shield: agent.shield.map, challengeSecret: challengeSecret(),
    }, TIMEOUTS.init).then(
      (ports) => {
        if (this.ports.http === 0) this.ports = ports;
        handle.ready = true;
        this.logger.info({ worker: index, pid: worker.process.pid, http_port: ports.http, https_port: ports.https }, 'worker listening');
      },
      async (err: Error) => {
        this.logger.error({ worker: index, err: err.message }, 'a worker could not start');
        await this.kill(handle);
      },
    );
  }

  private respawnLater(index: number): void {
    const now = Date.now();
    const recent = (this.deaths.get(index) ?? []).filter((t) => now - t < 60_000);
    recent.push(now);
    this.deaths.set(index, recent);
    const delay = Math.min(RESPAWN_MAX_MS, RESPAWN_BASE_MS * 2 ** (recent.length - 1));
    setTimeout(() => void this.serial(() => this.spawn(index)), delay).unref();
  }

  private onMessage(handle: Handle, msg: FromWorker): void {
    if (msg.t === 'fillLock') return this.tell(this.fillLocks.request(handle.index, msg.ticket, msg.key));
    if (msg.t === 'fillDone') return this.tell(this.fillLocks.done(handle.index, msg.key));
    if (msg.t === 'fillCancel') return this.fillLocks.cancel(handle.index, msg.ticket, msg.key);
    if (msg.t === 'stats') {
      handle.cacheObjects = msg.cacheObjects;
      handle.cacheBytes = msg.cacheBytes;
      handle.nodeObjects = msg.nodeObjects;
      handle.nodeBytes = msg.nodeBytes;
      handle.drains = msg.drains;
      if (msg.rollups.length > 0) this.rollups.add(msg.rollups);
      return;
    }
    const p = handle.pending.get(msg.id);
    if (p === undefined) return;
    handle.pending.delete(msg.id);
    clearTimeout(p.timer);
    if (msg.ok) p.resolve(msg.value);
    else p.reject(new Error(msg.error));
  }

  /** Sends fill-lock turns to the workers they are for (one gone meanwhile waits no more). */
  private tell(notices: TurnNotice[]): void {
    for (const n of notices) {
      const handle = this.handles.get(n.worker);
      try {
        handle?.worker.send({ t: 'fillTurn', ticket: n.ticket, key: n.key, lead: n.lead });
      } catch {
        // On its way out: workerGone releases what it held.
      }
    }
  }

  /** One request to one worker; rejects on its error, its exit (WorkerGone) or after timeoutMs (the worker is then killed). */
  private request<T>(handle: Handle, msg: ToWorker, timeoutMs: number): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        handle.pending.delete(id);
        this.logger.error({ worker: handle.index, message: msg.t, timeout_ms: timeoutMs }, 'a worker did not answer in time; replacing it');
        void this.kill(handle).then(() => reject(new WorkerGone(`worker ${handle.index} did not answer`)));
      }, timeoutMs);
      handle.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      try {
        handle.worker.send({ ...msg, id });
      } catch (err) {
        clearTimeout(timer);
        handle.pending.delete(id);
        reject(new WorkerGone((err as Error).message));
      }
    });
  }

  /** Kills a worker and waits until it is gone (it serves nothing more after this resolves). */
  private async kill(handle: Handle): Promise<void> {
    handle.ready = false;
    if (handle.worker.process.exitCode === null && handle.worker.process.signalCode === null) handle.worker.process.kill('SIGKILL');
    await handle.exited;
  }

  private get ready(): Handle[] {
    return [...this.handles.values()].filter((h) => h.ready);
  }

  /** Sends a message without an answer to every listening worker (in order with the operations before it). */
  private broadcast(msg: ToWorker): void {
    void this.serial(async () => {
      for (const h of this.ready) {
        try {
          h.worker.send(msg);
        } catch {
          // A worker on its way out: its replacement starts from the state in force.
        }
      }
    });
  }

  /**
   * Each listening worker's answer to the same request. A worker gone meanwhile (exited, or killed for not
   * answering) counts as done: it serves nothing, and its replacement starts from the state in force.
   */
  /** (The id of `msg` is a placeholder: each request gets its own.) */
  private async all<T>(msg: ToWorker, timeoutMs: number): Promise<{ index: number; value?: T; error?: string }[]> {
    return Promise.all(this.ready.map((h) => this.request<T>(h, msg, timeoutMs).then(
      (value) => ({ index: h.index, value }),
      (err: Error) => (err instanceof WorkerGone ? { index: h.index } : { index: h.index, error: err.message }),
    )));
  }

  // --- ControlledAgent ---

  get cacheEmpty(): boolean {
    for (const h of this.handles.values()) if (h.cacheObjects > 0 || h.nodeObjects > 0) return false;
    return this.agent.cacheEmpty;
  }

  get controlConfigVersion(): number {
    return this.agent.controlConfigVersion;
  }

  get appliedPurgeSequence(): number {
    return this.agent.appliedPurgeSequence;
  }

  applyConfigPush(push: ConfigPush): Promise<ConfigPushResult> {
    return this.serial(async () => {
      const prepared = this.agent.prepareConfigPush(push);
      const answers = await this.all<null>({ t: 'prepare', id: 0, push }, TIMEOUTS.prepare);
      const refused = answers.find((a) => a.error !== undefined);
      if (refused !== undefined) {
        for (const h of this.ready) h.worker.send({ t: 'abort', id: 0 } satisfies ToWorker);
        throw new ConfigRefusedError(refused.error!.startsWith('configuration refused') || refused.error!.startsWith('base_mismatch')
          ? refused.error! : `configuration refused by worker ${refused.index}: ${refused.error}`);
      }
      await this.commitEverywhere();
      return this.agent.commitConfigPush(prepared);
    });
  }

  /** Every worker prepared it: commit everywhere. A commit that fails (it cannot, short of a bug) takes its worker down. */
  private async commitEverywhere(): Promise<void> {
    const committed = await this.all<ConfigPushResult>({ t: 'commit', id: 0 }, TIMEOUTS.commit);
    for (const c of committed) {
      if (c.error === undefined) continue;
      const h = this.handles.get(c.index);
      this.logger.error({ worker: c.index, err: c.error }, 'a worker failed to commit a prepared configuration; replacing it');
      if (h !== undefined) await this.kill(h);
    }
  }

  applyPurge(cmd: PurgeCommand): Promise<PurgeResult> {
    return this.serial(async () => {
      if (cmd.sequence > 0 && cmd.sequence <= this.agent.appliedPurgeSequence) return { applied: false, purged: 0 };
      const answers = await this.all<PurgeResult>({ t: 'purge', id: 0, cmd }, TIMEOUTS.purge);
      const failed = answers.find((a) => a.error !== undefined);
      if (failed !== undefined) throw new Error(`worker ${failed.index}: ${failed.error}`);
      this.agent.applyPurge(cmd);
      return { applied: true, purged: answers.reduce((n, a) => n + (a.value?.purged ?? 0), 0) };
    });
  }

  startFromPurge(sequence: number, reset = false): void {
    this.agent.startFromPurge(sequence, reset);
    this.broadcast({ t: 'startFromPurge', sequence, reset });
  }

  beginPurgeCatchUp(target: number): boolean {
    const behind = this.agent.beginPurgeCatchUp(target);
    this.broadcast({ t: 'catchUp', target });
    return behind;
  }

  skipPurge(sequence: number, reason: string): void {
    this.agent.skipPurge(sequence, reason);
    this.broadcast({ t: 'skipPurge', sequence, reason });
  }

  controlPlaneLost(lost: boolean): void {
    this.agent.controlPlaneLost(lost);
    this.broadcast({ t: 'cutOff', lost });
  }

  /** Shown on the primary's /healthz only: the workers serve as they do while cut off. */
  controlPlaneRefused(refusal: TokenRefusal | null): void {
    this.agent.controlPlaneRefused(refusal);
  }

  /** Every worker fills its own cache; a URL counts as fetched when every worker fetched it. */
  async prefetch(endpointId: string, urls: readonly string[]): Promise<PrefetchResult> {
    const answers = await this.all<PrefetchResult>({ t: 'prefetch', id: 0, endpointId, urls }, TIMEOUTS.prefetch);
    const failed = new Map<string, string>();
    for (const a of answers) {
      if (a.error !== undefined) for (const url of urls) if (!failed.has(url)) failed.set(url, `worker ${a.index}: ${a.error}`);
      for (const f of a.value?.failed_urls ?? []) if (!failed.has(f.url)) failed.set(f.url, f.reason);
    }
    if (answers.length === 0) for (const url of urls) failed.set(url, 'no worker is listening');
    return { fetched: urls.length - failed.size, failed: failed.size, failed_urls: [...failed].map(([url, reason]) => ({ url, reason })) };
  }

  applyShieldMap(map: ShieldMapUpdate): void {
    this.agent.applyShieldMap(map);
    this.broadcast({ t: 'shield', map });
  }

  healthReport(): HealthReport {
    const report = this.agent.healthReport();
    // Without a node tier each worker's objects are its own; with one, the node tier holds every object once.
    let objects = 0;
    let bytes = 0;
    let nodeObjects = 0;
    let nodeBytes = 0;
    for (const h of this.handles.values()) {
      objects += h.cacheObjects;
      bytes += h.cacheBytes;
      nodeObjects = Math.max(nodeObjects, h.nodeObjects);
      nodeBytes = Math.max(nodeBytes, h.nodeBytes);
    }
    const shared = this.options.config.CACHE_DISK_BYTES > 0;
    return { ...report, cacheObjects: shared ? nodeObjects : objects, cacheBytes: bytes + nodeBytes, logDrains: mergeDrainStates([...this.handles.values()].map((h) => h.drains)) };
  }

  takeTrafficRollups(topN = 50): TrafficRollup[] {
    return this.rollups.take(topN);
  }

  // --- the process around it ---

  /** A configuration from a file (CONFIG_FILE, again on SIGHUP): prepared here and in every worker, then in force everywhere. */
  applyConfigFile(raw: unknown): Promise<void> {
    return this.serial(async () => {
      const prepared = this.agent.prepareConfig(raw);
      const push = fullPushOf(prepared.staged)!;
      const answers = await this.all<null>({ t: 'prepare', id: 0, push }, TIMEOUTS.prepare);
      const refused = answers.find((a) => a.error !== undefined);
      if (refused !== undefined) {
        for (const h of this.ready) h.worker.send({ t: 'abort', id: 0 } satisfies ToWorker);
        throw new ConfigRefusedError(`worker ${refused.index}: ${refused.error}`);
      }
      await this.commitEverywhere();
      this.agent.commitConfigPush(prepared);
      this.logger.info({ version: prepared.staged.version, endpoints: prepared.staged.snapshot.endpoints.length }, 'configuration applied');
    });
  }

  /**
   * New session ticket keys for every worker (and the ones started later): a stolen key decrypts at most an hour of
   * tickets. Tickets live 5 minutes (Node's sessionTimeout, nginx's ssl_session_timeout), so a rotation costs the
   * viewers that resume within the next 5 minutes one full handshake each.
   */
  rotateTicketKeys(): void {
    this.ticketKeys = randomBytes(48);
    this.broadcast({ t: 'ticketKeys', keys: this.ticketKeys });
  }

  setDefaultCertificate(cert: DefaultCertificate | null): void {
    this.certificate = cert === null ? null : cert.pair;
    this.agent.setDefaultCertificate(cert);
    this.broadcast({ t: 'certificate', certificate: this.certificate });
  }

  /** Every process's metrics as one registry (counters summed, the configuration version and purge sequence the highest). */
  async metricsText(): Promise<string> {
    const answers = await this.all<client.MetricObjectWithValues<client.MetricValue<string>>[]>({ t: 'metrics', id: 0 }, TIMEOUTS.metrics);
    const own = await this.agent.metrics.registry.getMetricsAsJSON();
    const all = [own, ...answers.filter((a) => a.value !== undefined).map((a) => a.value!)];
    return client.AggregatorRegistry.aggregate(all as Parameters<typeof client.AggregatorRegistry.aggregate>[0]).metrics();
  }

  healthView(): Record<string, unknown> {
    return { ...this.agent.healthView(this.healthReport()), workers: { configured: this.options.config.WORKERS, running: this.running } };
  }

  /** SIGTERM: every worker closes its listeners and finishes what it serves (up to timeoutMs), then the primary's own close. */
  async close(timeoutMs: number): Promise<void> {
    this.stopping = true;
    if (this.ticketRotation !== null) clearInterval(this.ticketRotation);
    const handles = [...this.handles.values()];
    for (const h of handles) {
      try {
        h.worker.send({ t: 'drain', timeoutMs } satisfies ToWorker);
      } catch {
        // already gone
      }
    }
    const deadline = setTimeout(() => { for (const h of handles) void this.kill(h); }, timeoutMs + 3_000);
    deadline.unref();
    await Promise.all(handles.map((h) => h.exited));
    clearTimeout(deadline);
    await this.agent.close(timeoutMs);
  }
}
