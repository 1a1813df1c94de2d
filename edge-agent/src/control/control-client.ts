// The agent's end of the control channel (DESIGN.md §7): one bidirectional
// gRPC stream to the control plane, EdgeControlService.Connect.
//
// Per stream: Hello (node id, hostname, region, agent version, the config
// version and purge sequence held) with `authorization: Bearer <token>`; the
// Welcome gives the heartbeat and traffic intervals and the platform's purge
// sequence (behind it, the agent stops answering from its cache until the
// missed purges, which follow, are applied); then pushes, each acknowledged
// after it took effect: ConfigUpdate (full or delta, EdgeAgent.applyConfigPush),
// Purge (in order), PrefetchJob (off the stream's path, a few at a time).
// Heartbeats and traffic reports go out on the Welcome's intervals.
//
// A stream that fails or ends is retried with capped exponential backoff and
// full jitter, from what the agent holds; a refused token is retried at the cap.
// Meanwhile the agent serves its configuration and cache as they are, until it
// has been without a stream for 3 heartbeat intervals: then it is cut off
// (EdgeAgent.controlPlaneLost: purges made meanwhile cannot reach it, and its
// cache revalidates or keeps serving as CACHE_WHEN_DISCONNECTED says) until
// the next Welcome.
// Each attempt uses a channel of its own, so grpc-js's own reconnect backoff
// never stretches ours. The token is never logged.
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import { Client, credentials, Metadata, status as GrpcStatus, type ChannelCredentials, type ClientDuplexStream, type StatusObject } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { ConfigUpdate, ConnectRequest, ConnectResponse, PrefetchJob, Purge, Welcome } from '../../../shared/gen/edge/v1/control_pb.ts';
import { CONTROL_FLOW_CONTROL_WINDOW_BYTES, edgeControlService } from '../../../shared/src/proto/edge-control.ts';
import { Backoff, DEFAULT_BACKOFF, type BackoffOptions } from './backoff.ts';
import { ConfigRefusedError, type ConfigPushResult, type ControlledAgent, type TokenRefusal } from './controlled-agent.ts';
import type { TrafficRollup } from '../metrics/traffic.ts';
import {
  configAck, configPushOf, heartbeatMessage, shieldMapOf, helloMessage, prefetchAck, purgeAck, purgeCommandOf, trafficReportMessage, type NodeStatus,
} from './messages.ts';

export interface ControlClientOptions {
  /** grpc://host:port or http://host:port (h2c), grpcs:// or https:// (TLS). */
  url: string;
  token: string;
  /** PEM bundle trusted for TLS besides the system roots. */
  caPem?: Buffer;
  agent: ControlledAgent;
  nodeId: string;
  hostname: string;
  region: string;
  agentVersion: string;
  /** Origin shield: where other agents reach this one (unset: it does not shield), and how its region is shown. */
  shield?: { address?: string; regionName?: string; regionCountryCode?: string; regionCity?: string };
  logger: Logger;
  backoff?: BackoffOptions;
  /** A stream that stayed up this long resets the backoff (default 10 s). */
  resetBackoffAfterMs?: number;
  /** Time for the control plane to answer Hello with Welcome (default 15 s). */
  welcomeTimeoutMs?: number;
  /** HTTP/2 keepalive ping interval and timeout: a control plane gone silent is noticed within their sum (default 10 s + 5 s). */
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
  /** Prefetch jobs run at once (default 2); more wait, up to maxQueuedPrefetches (default 1,000), beyond which they are refused. */
  prefetchConcurrency?: number;
  maxQueuedPrefetches?: number;
  /** Time to wait for the control plane to close the stream after the agent ended it (default 2 s). */
  closeTimeoutMs?: number;
  /** Largest push accepted (default 256 MiB: a full configuration of 10,000 endpoints is about 20 MiB). */
  maxMessageBytes?: number;
  /** Heartbeat intervals without a stream after which the agent is cut off from the control plane (default 3). */
  cutOffAfterIntervals?: number;
}

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000;

export const DEFAULT_TRAFFIC_REPORT_INTERVAL_MS = 60_000;
/** Traffic reports kept until the control plane confirms them (a day of one report a minute). */
export const MAX_UNCONFIRMED_REPORTS = 1_440;

/** Heartbeat intervals without a stream after which the agent counts as cut off (as the control plane marks a silent node offline). */
export const CUT_OFF_AFTER_INTERVALS = 3;

export interface ControlTarget {
  /** host:port for grpc-js. */
  address: string;
  tls: boolean;
}

/** CONTROL_PLANE_URL → the address and transport (the path, if any, is not used: gRPC names its own). */
export function parseControlPlaneUrl(url: string): ControlTarget {
  const u = new URL(url);
  const scheme = u.protocol.replace(/:$/, '');
  const tls = scheme === 'grpcs' || scheme === 'https';
  if (!tls && scheme !== 'grpc' && scheme !== 'http') throw new Error(`unsupported CONTROL_PLANE_URL scheme ${scheme}`);
  if (u.hostname === '') throw new Error('CONTROL_PLANE_URL has no host');
  const port = u.port || (tls ? '443' : '80');
  return { address: `${u.hostname}:${port}`, tls };
}

type Stream = ClientDuplexStream<ConnectRequest, ConnectResponse>;

interface Session {
  client: Client;
  call: Stream;
  welcome: Welcome | null;
  /** The Hello said the cache was empty (Welcome's purge sequence is then taken as applied). */
  cacheEmpty: boolean;
  startedAt: number;
  ended: boolean;
  timers: NodeJS.Timeout[];
  /**
   * A push still being applied (an agent with workers applies it in each before the ack): later messages wait for it,
   * so pushes, purges and prefetches keep the stream's order. null: none (the usual case: applied as it arrives).
   */
  applying: Promise<void> | null;
}

interface QueuedPrefetch {
  job: PrefetchJob;
}

export interface ControlClientEvents {
  /** Welcome received. */
  connected: [welcome: Welcome];
  /** The stream ended; the next attempt is in retryInMs (null: the client is closing). */
  disconnected: [info: { code: number; details: string; retryInMs: number | null }];
}

export class ControlClient extends EventEmitter<ControlClientEvents> {
  private readonly options: ControlClientOptions;
  private readonly agent: ControlledAgent;
  private readonly logger: Logger;
  private readonly target: ControlTarget;
  private readonly creds: ChannelCredentials;
  private readonly backoff: Backoff;
  private session: Session | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private closing = false;
  private draining = false;
  private readonly prefetchQueue: QueuedPrefetch[] = [];
  private prefetchRunning = 0;
  private readonly prefetchIdle = new Set<() => void>();
  /** Traffic reports not yet confirmed stored, oldest first. */
  private unconfirmed: { id: string; rollups: TrafficRollup[]; message: ConnectRequest | null; sentOn: Session | null }[] = [];
  private reportsDropped = 0;
  /** The heartbeat interval the last Welcome gave (the cut-off bound is counted in it). */
  private heartbeatMs = DEFAULT_HEARTBEAT_INTERVAL_MS;
  /** Runs out when the agent has been without a stream for the cut-off bound. */
  private cutOffTimer: NodeJS.Timeout | null = null;
  /** The control plane refuses the token (since the first refusal of the run); null once a stream is welcomed. */
  private refusal: TokenRefusal | null = null;

  constructor(options: ControlClientOptions) {
    super();
    this.options = options;
    this.agent = options.agent;
    this.logger = options.logger;
    this.target = parseControlPlaneUrl(options.url);
    // grpc-js trusts only the roots it is given: the extra CA goes with the system's, not instead of them.
    const roots = options.caPem ? Buffer.concat([Buffer.from(rootCertificates.join('\n') + '\n'), options.caPem]) : null;
    this.creds = this.target.tls ? credentials.createSsl(roots) : credentials.createInsecure();
    this.backoff = new Backoff(options.backoff ?? DEFAULT_BACKOFF);
  }

  /** Whether a stream is up (Welcome received). */
  get connected(): boolean {
    return this.session?.welcome != null && !this.session.ended;
  }

  start(): void {
    if (this.session !== null || this.retryTimer !== null || this.closing) return;
    this.armCutOff();
    this.connect();
  }

  /** Counts the cut-off bound from now, unless it is already counting (a failed attempt does not restart it). */
  private armCutOff(): void {
    if (this.cutOffTimer !== null || this.closing) return;
    const ms = (this.options.cutOffAfterIntervals ?? CUT_OFF_AFTER_INTERVALS) * this.heartbeatMs;
    this.cutOffTimer = setTimeout(() => {
      this.cutOffTimer = null;
      if (this.connected || this.closing) return;
      this.logger.warn({ control_plane: this.options.url, without_stream_ms: ms }, 'cut off from the control plane');
      this.agent.controlPlaneLost(true);
    }, ms);
    this.cutOffTimer.unref();
  }

  private channelOptions() {
    const max = this.options.maxMessageBytes ?? 256 * 1024 * 1024;
    return {
      'grpc.keepalive_time_ms': this.options.keepaliveTimeMs ?? 10_000,
      'grpc.keepalive_timeout_ms': this.options.keepaliveTimeoutMs ?? 5_000,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.max_receive_message_length': max,
      'grpc.primary_user_agent': `edge-agent/${this.options.agentVersion}`,
      // A channel per attempt, with no subchannel shared with an earlier attempt's (and its backoff).
      'grpc.use_local_subchannel_pool': 1,
      'grpc.enable_retries': 0,
      'grpc-node.flow_control_window': CONTROL_FLOW_CONTROL_WINDOW_BYTES,
    };
  }

  private connect(): void {
    this.retryTimer = null;
    if (this.closing) return;
    const client = new Client(this.target.address, this.creds, this.channelOptions());
    const metadata = new Metadata();
    metadata.set('authorization', `Bearer ${this.options.token}`);
    const def = edgeControlService.connect;
    const call = client.makeBidiStreamRequest<ConnectRequest, ConnectResponse>(def.path, def.requestSerialize, def.responseDeserialize, metadata);
    const session: Session = { client, call, welcome: null, cacheEmpty: false, startedAt: Date.now(), ended: false, timers: [], applying: null };
    this.session = session;
    call.on('data', (msg: ConnectResponse) => this.onMessage(session, msg));
    call.on('error', () => {}); // the status event below carries it
    call.on('status', (s: StatusObject) => this.onEnd(session, s.code, s.details));
    const welcomeTimer = setTimeout(() => {
      if (session.welcome === null && !session.ended) {
        this.logger.warn({ control_plane: this.options.url }, 'no Welcome from the control plane in time; retrying');
        call.cancel();
      }
    }, this.options.welcomeTimeoutMs ?? 15_000);
    welcomeTimer.unref();
    session.timers.push(welcomeTimer);
    session.cacheEmpty = this.agent.cacheEmpty;
    this.write(session, helloMessage({
      cacheEmpty: session.cacheEmpty,
      nodeId: this.options.nodeId,
      hostname: this.options.hostname,
      region: this.options.region,
      agentVersion: this.options.agentVersion,
      configVersion: this.agent.controlConfigVersion,
      purgeSequence: this.agent.appliedPurgeSequence,
      shieldAddress: this.options.shield?.address, regionName: this.options.shield?.regionName,
      regionCountryCode: this.options.shield?.regionCountryCode, regionCity: this.options.shield?.regionCity,
    }));
  }

  private write(session: Session, msg: ConnectRequest): void {
    if (session.ended) return;
    try {
      session.call.write(msg);
    } catch (err) {
      this.logger.debug({ err: (err as Error).message }, 'control stream write failed');
    }
  }

  private onEnd(session: Session, code: number, details: string): void {
    if (session.ended) return;
    session.ended = true;
    for (const t of session.timers) clearTimeout(t);
    session.timers = [];
    session.client.close();
    if (this.session === session) this.session = null;
    const wasUp = session.welcome !== null;
    if (wasUp) this.armCutOff();
    if (this.closing) {
      this.emit('disconnected', { code, details, retryInMs: null });
      return;
    }
    if (wasUp && Date.now() - session.startedAt >= (this.options.resetBackoffAfterMs ?? 10_000)) this.backoff.reset();
    const refused = code === GrpcStatus.UNAUTHENTICATED || code === GrpcStatus.PERMISSION_DENIED;
    const delay = refused ? this.backoff.atCap() : this.backoff.next();
    const fields = { code: GrpcStatus[code] ?? code, details, retry_in_ms: delay, attempt: this.backoff.attempts };
    if (refused) this.tokenRefused(String(fields.code), details, fields);
    else this.logger.warn(fields, wasUp ? 'disconnected from the control plane' : 'cannot connect to the control plane');
    this.emit('disconnected', { code, details, retryInMs: delay });
    this.retryTimer = setTimeout(() => this.connect(), delay);
    this.retryTimer.unref();
  }

  /**
   * A refusal of the token: logged once per run of refusals (an error naming the reason, never the token), the retries
   * after it at debug; the agent is told each time, so /healthz shows the latest reason and when the refusals began.
   */
  private tokenRefused(code: string, reason: string, fields: Record<string, unknown>): void {
    const first = this.refusal === null;
    this.refusal = { code, reason, since: this.refusal?.since ?? new Date().toISOString() };
    this.agent.controlPlaneRefused(this.refusal);
    if (first) this.logger.error(fields, 'the control plane refused the agent token (revoked, expired or wrong): retrying at the backoff cap; /healthz answers 503 until it is accepted (check AGENT_TOKEN)');
    else this.logger.debug(fields, 'the agent token is still refused');
  }

  private onMessage(session: Session, msg: ConnectResponse): void {
    if (session.ended) return;
    if (session.applying !== null) {
      // Behind a push still being applied: in order, after it.
      const next: Promise<void> = session.applying.then(() => this.handle(session, msg));
      session.applying = next;
      void next.then(() => { if (session.applying === next) session.applying = null; });
      return;
    }
    const pending = this.handle(session, msg);
    if (pending instanceof Promise) {
      session.applying = pending;
      void pending.then(() => { if (session.applying === pending) session.applying = null; });
    }
  }

  /** One message; a promise when it is applied asynchronously (never rejects). */
  private handle(session: Session, msg: ConnectResponse): void | Promise<void> {
    if (session.ended) return;
    switch (msg.message.case) {
      case 'welcome':
        return this.onWelcome(session, msg.message.value);
      case 'configUpdate':
        return this.onConfigUpdate(session, msg.message.value);
      case 'purge':
        return this.onPurge(session, msg.message.value);
      case 'prefetchJob':
        return this.onPrefetch(msg.message.value);
      case 'shieldMap':
        return this.agent.applyShieldMap(shieldMapOf(msg.message.value));
      case 'trafficReceipt':
        return this.onTrafficReceipt(msg.message.value.reportIds);
      default:
        this.logger.debug('unknown message on the control stream ignored');
    }
  }

  private onConfigUpdate(session: Session, u: ConfigUpdate): void | Promise<void> {
    const version = Number(u.version);
    const t0 = performance.now();
    const applied = (r: ConfigPushResult) => {
      this.logger.info({ version, full: u.full, base_version: Number(u.baseVersion), changed: r.changed, compiled: r.compiled, ms: Math.round(performance.now() - t0) }, 'configuration applied');
      this.write(session, configAck(version, u.nonce, null));
    };
    const refused = (err: unknown) => {
      const error = err instanceof ConfigRefusedError ? err.message : `configuration refused: ${(err as Error).message}`;
      this.logger.warn({ version, full: u.full, base_version: Number(u.baseVersion), error }, 'configuration refused; the previous one keeps serving');
      this.write(session, configAck(version, u.nonce, error));
    };
    try {
      const r = this.agent.applyConfigPush(configPushOf(u));
      if (r instanceof Promise) return r.then(applied, refused);
      applied(r);
    } catch (err) {
      refused(err);
    }
  }

  private onWelcome(session: Session, welcome: Welcome): void {
    if (session.welcome !== null) return;
    session.welcome = welcome;
    this.heartbeatMs = clampInterval(welcome.heartbeatIntervalMs, DEFAULT_HEARTBEAT_INTERVAL_MS);
    if (this.cutOffTimer !== null) clearTimeout(this.cutOffTimer);
    this.cutOffTimer = null;
    if (session.cacheEmpty || welcome.resetCache) this.agent.startFromPurge(Number(welcome.purgeSequence), welcome.resetCache);
    this.agent.beginPurgeCatchUp(Number(welcome.purgeSequence));
    // Back: what it missed is applied before its cache answers alone again (the catch-up above).
    this.agent.controlPlaneLost(false);
    if (this.refusal !== null) {
      this.logger.info({ refused_since: this.refusal.since }, 'the control plane accepts the agent token again');
      this.refusal = null;
      this.agent.controlPlaneRefused(null);
    }
    this.logger.info({
      control_plane: this.options.url, node_id: this.options.nodeId, config_version: this.agent.controlConfigVersion,
      active_config_version: Number(welcome.configVersion), purge_sequence: this.agent.appliedPurgeSequence,
      platform_purge_sequence: Number(welcome.purgeSequence),
    }, 'connected to the control plane');
    const heartbeatMs = this.heartbeatMs;
    const trafficMs = clampInterval(welcome.trafficReportIntervalMs, DEFAULT_TRAFFIC_REPORT_INTERVAL_MS);
    const hb = setInterval(() => this.sendHeartbeat(session), heartbeatMs);
    const tr = setInterval(() => this.sendTraffic(session), trafficMs);
    hb.unref();
    tr.unref();
    session.timers.push(hb, tr);
    this.sendHeartbeat(session);
    // Reports the last stream did not get confirmed go again now.
    if (this.unconfirmed.length > 0) {
      this.logger.info({ reports: this.unconfirmed.length }, 'traffic reports not confirmed by the control plane sent again');
      this.sendTraffic(session, true);
    }
    this.emit('connected', welcome);
  }

  private onPurge(session: Session, p: Purge): void | Promise<void> {
    const cmd = purgeCommandOf(p);
    if (cmd === null) {
      const error = `unknown purge type ${p.type}`;
      this.agent.skipPurge(Number(p.sequence), error);
      this.write(session, purgeAck(p, error));
      return;
    }
    const failed = (err: unknown) => {
      this.logger.error({ purge_id: p.purgeId, err: (err as Error).message }, 'purge failed');
      this.write(session, purgeAck(p, (err as Error).message));
    };
    try {
      const r = this.agent.applyPurge(cmd);
      if (r instanceof Promise) return r.then(() => this.write(session, purgeAck(p, null)), failed);
      this.write(session, purgeAck(p, null));
    } catch (err) {
      failed(err);
    }
  }

  private onPrefetch(job: PrefetchJob): void {
    const max = this.options.maxQueuedPrefetches ?? 1000;
    if (this.prefetchQueue.length >= max) {
      const session = this.session;
      if (session) this.write(session, prefetchAck(job.jobId, job.nonce, { fetched: 0, failed: job.urls.length, failed_urls: [] }, 'agent busy: too many prefetch jobs queued'));
      return;
    }
    this.prefetchQueue.push({ job });
    this.pumpPrefetches();
  }

  private pumpPrefetches(): void {
    const limit = this.options.prefetchConcurrency ?? 2;
    while (this.prefetchRunning < limit && this.prefetchQueue.length > 0) {
      const { job } = this.prefetchQueue.shift()!;
      this.prefetchRunning++;
      this.agent.prefetch(job.endpointId, job.urls).then(
        (result) => {
          this.logger.info({ job_id: job.jobId, endpoint: job.endpointId, fetched: result.fetched, failed: result.failed }, 'prefetch done');
          this.ackPrefetch(job, prefetchAck(job.jobId, job.nonce, result, null));
        },
        (err: Error) => this.ackPrefetch(job, prefetchAck(job.jobId, job.nonce, { fetched: 0, failed: job.urls.length, failed_urls: [] }, err.message)),
      ).finally(() => {
        this.prefetchRunning--;
        this.pumpPrefetches();
        if (this.prefetchRunning === 0 && this.prefetchQueue.length === 0) {
          for (const resolve of this.prefetchIdle) resolve();
          this.prefetchIdle.clear();
        }
      });
    }
  }

  /** The result goes on whichever stream is up now (the job may have arrived on an earlier one). */
  private ackPrefetch(job: PrefetchJob, ack: ConnectRequest): void {
    const session = this.session;
    if (session?.welcome) this.write(session, ack);
    else this.logger.warn({ job_id: job.jobId }, 'prefetch result not sent: the control stream is down');
  }

  private sendHeartbeat(session: Session): void {
    const report = this.agent.healthReport();
    const status: NodeStatus = this.draining ? 'draining' : report.status;
    this.write(session, heartbeatMessage(status, this.agent.controlConfigVersion, report));
  }

  /**
   * Takes the counts since the last report into a report of its own (a new id) and sends every report the
   * control plane has not confirmed yet (TrafficReceipt), oldest first: a report lost with a stream, or
   * stored by a replica that died before answering, is sent again with its id, and the control plane counts
   * an id once. Reports wait at most MAX_UNCONFIRMED_REPORTS (the oldest go first, counted).
   */
  private sendTraffic(session: Session, resendOnly = false): void {
    if (!resendOnly) {
      const rollups = this.agent.takeTrafficRollups();
      if (rollups.length > 0) {
        this.unconfirmed.push({ id: randomUUID(), message: null, rollups, sentOn: null });
        while (this.unconfirmed.length > MAX_UNCONFIRMED_REPORTS) {
          this.unconfirmed.shift();
          this.reportsDropped++;
          if (this.reportsDropped === 1 || this.reportsDropped % 100 === 0) this.logger.warn({ dropped: this.reportsDropped }, 'traffic reports dropped: too many unconfirmed');
        }
      }
    }
    for (const report of this.unconfirmed) {
      // Sent once per stream: the receipt comes on the same stream (a new stream sends it again).
      if (report.sentOn === session) continue;
      report.message ??= trafficReportMessage(report.rollups, report.id);
      report.sentOn = session;
      this.write(session, report.message);
    }
  }

  private onTrafficReceipt(ids: readonly string[]): void {
    if (!ids.length) return;
    const done = new Set(ids);
    this.unconfirmed = this.unconfirmed.filter((r) => !done.has(r.id));
  }

  /** Traffic reports sent and not yet confirmed stored (tests). */
  get unconfirmedReports(): number {
    return this.unconfirmed.length;
  }

  /** Shutting down: tell the control plane at once (Heartbeat draining); later heartbeats say draining too. */
  drain(): void {
    this.draining = true;
    const session = this.session;
    if (session?.welcome) this.sendHeartbeat(session);
  }

  /** Resolves when no prefetch job runs or waits (for tests and shutdown). */
  prefetchesSettled(): Promise<void> {
    if (this.prefetchRunning === 0 && this.prefetchQueue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.prefetchIdle.add(resolve));
  }

  /**
   * Ends the stream cleanly (the last traffic counts are sent, the agent's side
   * is closed and the control plane's end awaited for closeTimeoutMs) and stops reconnecting.
   */
  async close(): Promise<void> {
    this.closing = true;
    if (this.cutOffTimer !== null) clearTimeout(this.cutOffTimer);
    this.cutOffTimer = null;
    if (this.retryTimer !== null) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    const session = this.session;
    if (session === null || session.ended) return;
    if (session.welcome) this.sendTraffic(session);
    const ended = new Promise<void>((resolve) => session.call.once('status', () => resolve()));
    session.call.end();
    const timer = setTimeout(() => session.call.cancel(), this.options.closeTimeoutMs ?? 2000);
    timer.unref();
    await ended;
    clearTimeout(timer);
  }
}

/** An interval from the Welcome, defaulted when absent and kept within 50 ms .. 1 h. */
function clampInterval(ms: number, fallback: number): number {
  if (!ms) return fallback;
  return Math.min(3_600_000, Math.max(50, ms));
}

/** Reads CONTROL_PLANE_CA_FILE (a clear error for main.ts when it cannot). */
export function readCaFile(path: string): Buffer {
  const pem = readFileSync(path);
  if (!pem.toString('latin1').includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${path} holds no PEM certificate`);
  return pem;
}
