// A small fake control plane for the agent's control-stream tests: a real
// grpc-js server with the shared EdgeControlService definition on 127.0.0.1,
// which records what each stream sends and lets the test push messages.
import { create } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status, type Metadata, type ServerDuplexStream } from '@grpc/grpc-js';
import { configDigest, splitSnapshot, type EncodedResource } from '../../shared/src/config/resources.ts';
import {
  ConfigResourceSchema, ConfigUpdateSchema, ConnectResponseSchema, PrefetchJobSchema, PurgeSchema, WelcomeSchema,
  type Ack, type ConnectRequest, type ConnectResponse, type Heartbeat, type Hello, type PurgeType, type TrafficReport,
} from '../../shared/gen/edge/v1/control_pb.ts';
import { edgeControlService, type OutgoingResponse } from '../../shared/src/proto/edge-control.ts';

export interface FakeStream {
  call: ServerDuplexStream<ConnectRequest, OutgoingResponse>;
  metadata: Metadata;
  received: ConnectRequest[];
  /** The agent ended its side (half-close). */
  clientEnded: boolean;
  /** The call is over (either side). */
  closed: boolean;
}

export interface WelcomeFields {
  heartbeatIntervalMs?: number;
  trafficReportIntervalMs?: number;
  purgeSequence?: number;
  configVersion?: number;
  resetCache?: boolean;
}

export class FakeControlPlane {
  readonly server = new Server();
  port = 0;
  /** The token it accepts (a test changes it to refuse, or accept again, the agent's). */
  token: string;
  readonly streams: FakeStream[] = [];
  /** Fields of the Welcome answered to each Hello (null: no Welcome, the test answers itself). */
  welcome: WelcomeFields | null = { heartbeatIntervalMs: 60_000, trafficReportIntervalMs: 60_000 };
  /** Called after the Welcome went out (e.g. to push a configuration). */
  onHello: ((stream: FakeStream, hello: Hello) => void) | null = null;
  private readonly waiters = new Set<() => void>();

  private constructor(token: string) {
    this.token = token;
    this.server.addService(edgeControlService, {
      connect: (call: ServerDuplexStream<ConnectRequest, OutgoingResponse>) => this.handle(call),
    });
  }

  static async start(token: string, port = 0): Promise<FakeControlPlane> {
    const fake = new FakeControlPlane(token);
    fake.port = await new Promise<number>((resolve, reject) => {
      fake.server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
    });
    return fake;
  }

  private handle(call: ServerDuplexStream<ConnectRequest, OutgoingResponse>): void {
    const stream: FakeStream = { call, metadata: call.metadata, received: [], clientEnded: false, closed: false };
    this.streams.push(stream);
    const changed = () => {
      for (const w of [...this.waiters]) w();
    };
    call.on('error', () => {});
    call.on('close', () => { stream.closed = true; changed(); });
    call.on('cancelled', () => { stream.closed = true; changed(); });
    call.on('end', () => {
      stream.clientEnded = true;
      stream.closed = true;
      changed();
      call.end();
    });
    if (call.metadata.get('authorization')[0] !== `Bearer ${this.token}`) {
      call.emit('error', { code: status.UNAUTHENTICATED, details: 'invalid agent token' });
      changed();
      return;
    }
    call.on('data', (msg: ConnectRequest) => {
      stream.received.push(msg);
      if (msg.message.case === 'hello' && this.welcome !== null) {
        const w = this.welcome;
        this.send(stream, {
          case: 'welcome',
          value: create(WelcomeSchema, {
            nodeId: msg.message.value.nodeId,
            heartbeatIntervalMs: w.heartbeatIntervalMs ?? 60_000,
            trafficReportIntervalMs: w.trafficReportIntervalMs ?? 60_000,
            purgeSequence: BigInt(w.purgeSequence ?? 0),
            configVersion: BigInt(w.configVersion ?? 0),
            resetCache: w.resetCache ?? false,
          }),
        });
        this.onHello?.(stream, msg.message.value);
      }
      changed();
    });
  }

  send(stream: FakeStream, message: ConnectResponse['message']): void {
    stream.call.write(create(ConnectResponseSchema, { message }));
  }

  /** The newest stream. */
  get last(): FakeStream {
    const s = this.streams.at(-1);
    if (!s) throw new Error('no stream yet');
    return s;
  }

  /**
   * Resolves with check()'s first truthy value, re-checked whenever a stream
   * receives something and every 20 ms (for state outside the fake); fails after timeoutMs.
   */
  waitFor<T>(check: () => T | undefined | null | false, what = 'condition', timeoutMs = 15_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const attempt = () => {
        const v = check();
        if (v !== undefined && v !== null && v !== false) {
          this.waiters.delete(attempt);
          clearTimeout(timer);
          clearInterval(poll);
          resolve(v);
        }
      };
      const poll = setInterval(attempt, 20);
      const timer = setTimeout(() => {
        this.waiters.delete(attempt);
        clearInterval(poll);
        reject(new Error(`timed out waiting for ${what}`));
      }, timeoutMs);
      this.waiters.add(attempt);
      attempt();
    });
  }

  waitForStream(n: number): Promise<FakeStream> {
    return this.waitFor(() => this.streams.length >= n && this.streams[n - 1], `stream #${n}`);
  }

  hello(stream: FakeStream): Promise<Hello> {
    return this.waitFor(() => {
      const m = stream.received.find((r) => r.message.case === 'hello');
      return m?.message.case === 'hello' ? m.message.value : undefined;
    }, 'Hello');
  }

  /** The n-th Ack of a kind on the stream (1-based), when it arrives. */
  ack(stream: FakeStream, pick: (a: Ack) => boolean, what = 'Ack'): Promise<Ack> {
    return this.waitFor(() => {
      for (const r of stream.received) if (r.message.case === 'ack' && pick(r.message.value)) return r.message.value;
      return undefined;
    }, what);
  }

  heartbeats(stream: FakeStream): Heartbeat[] {
    return stream.received.flatMap((r) => (r.message.case === 'heartbeat' ? [r.message.value] : []));
  }

  trafficReports(stream: FakeStream): TrafficReport[] {
    return stream.received.flatMap((r) => (r.message.case === 'trafficReport' ? [r.message.value] : []));
  }

  async stop(): Promise<void> {
    this.server.forceShutdown();
  }
}

// Pushes made from snapshots, as the control plane makes them from versions.

/** A snapshot as tests write it (entries need not be complete: the agent fills defaults or refuses). */
export interface SnapshotLike {
  endpoints?: object[];
  response_headers_policies?: object[];
  log_drains?: object[];
}

const split = (s: SnapshotLike) => splitSnapshot(s as Parameters<typeof splitSnapshot>[0]);

function resourceMessages(resources: EncodedResource[], version: number) {
  return resources.map((r) => create(ConfigResourceSchema, { key: r.key, version: BigInt(version), body: r.body, sha256: r.sha256 }));
}

export function fullPush(version: number, snapshot: SnapshotLike, nonce = `full-${version}`): ConnectResponse['message'] {
  const resources = split(snapshot);
  return {
    case: 'configUpdate',
    value: create(ConfigUpdateSchema, {
      version: BigInt(version), nonce, full: true, resources: resourceMessages(resources, version),
      digest: configDigest(resources.map((r) => [r.key, r.sha256])), resourceCount: resources.length,
    }),
  };
}

export function deltaPush(
  baseVersion: number, base: SnapshotLike, version: number, next: SnapshotLike,
  overrides: { digest?: string; resourceCount?: number; baseVersion?: number } = {},
): ConnectResponse['message'] {
  const before = new Map(split(base).map((r) => [r.key, r.sha256]));
  const after = split(next);
  const changed = after.filter((r) => before.get(r.key) !== r.sha256);
  const keys = new Set(after.map((r) => r.key));
  const removed = [...before.keys()].filter((k) => !keys.has(k));
  return {
    case: 'configUpdate',
    value: create(ConfigUpdateSchema, {
      version: BigInt(version), nonce: `delta-${version}`, full: false, baseVersion: BigInt(overrides.baseVersion ?? baseVersion),
      resources: resourceMessages(changed, version), removed,
      digest: overrides.digest ?? configDigest(after.map((r) => [r.key, r.sha256])), resourceCount: overrides.resourceCount ?? after.length,
    }),
  };
}

export function purgePush(sequence: number, type: PurgeType, fields: { paths?: string[]; tags?: string[]; endpointId?: string } = {}): ConnectResponse['message'] {
  return {
    case: 'purge',
    value: create(PurgeSchema, { sequence: BigInt(sequence), purgeId: `purge-${sequence}`, endpointId: fields.endpointId ?? '', type, paths: fields.paths ?? [], tags: fields.tags ?? [], nonce: `pn-${sequence}` }),
  };
}

export function prefetchPush(jobId: string, endpointId: string, urls: string[]): ConnectResponse['message'] {
  return { case: 'prefetchJob', value: create(PrefetchJobSchema, { jobId, endpointId, urls, priority: 'normal', nonce: `jn-${jobId}` }) };
}
