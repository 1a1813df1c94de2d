// Simulated edge agents for the control-channel benchmark (issue 12): N real
// gRPC streams (EdgeControlService.Connect through @grpc/grpc-js, each on its
// own HTTP/2 connection by default) that say Hello and answer every push as a
// real agent would, without a cache: a configuration push is decoded (every
// resource body's SHA-256 checked and its JSON parsed, the delta applied to
// the held resource set, the digest checked) and acknowledged, or nacked when
// it cannot be applied; a purge is acknowledged with its sequence, a prefetch
// job with its URL count as fetched.
//
// Run as its own process (child_process.fork/spawn with an IPC channel):
//   node bench/lib/sim-agents.ts --target 127.0.0.1:PORT --n 200 --token agt_...
//     [--heartbeat-ms 5000] [--batch 100] [--report-acks]
//     [--connection-per-client | --shared-connection] [--region bench] [--verify-each]
// A configuration push is verified once per process and base and shared by the
// agents whose bytes are identical (SharedPushes); --verify-each verifies every copy.
// Messages to the parent (process.send):
//   {type: 'connected', n, ms}               every stream has its Welcome
//   {type: 'acked', kind, key, count, nacks, firstReceivedAt, lastAckAt, bytes, maxBytes, full, errors}
//        with --report-acks, once per push when all N agents have answered it (times: performance.timeOrigin + performance.now(), a
//        wall clock shared by processes of one host; bytes: protobuf message
//        bytes received for that push, summed over agents)
//   {type: 'usage', cpuMs, rss}              answer to {type: 'usage'}
//   {type: 'pending', pushes: [...]}         answer to {type: 'pending'}: pushes not yet answered by all
//   {type: 'ended', count, reason}           streams that ended or failed (a real agent would reconnect)
// {type: 'close'} from the parent (or its going away) ends every stream and the process.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { create, fromBinary, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { ConfigDigest, sha256Hex } from '../../shared/src/config/resources.ts';
import {
  AckKind, AckSchema, ConnectRequestSchema, ConnectResponseSchema,
  type ConfigUpdate, type ConnectRequest, type ConnectResponse,
} from '../../shared/gen/edge/v1/control_pb.ts';
import { CONTROL_FLOW_CONTROL_WINDOW_BYTES, edgeControlService } from '../../shared/src/proto/edge-control.ts';
import { wallNow } from './stats.ts';

/** The prefix of a refusal the control plane answers with a full push (as the real agent's BASE_MISMATCH). */
export const BASE_MISMATCH = 'base_mismatch:';

// ---- one agent's apply-and-ack logic (pure: unit-tested in sim-agents.test.ts) ----

export interface AgentState {
  nodeId: string;
  /** The configuration version applied (0 = none). */
  configVersion: bigint;
  /** Resource key → SHA-256 of the body held. */
  resources: Map<string, string>;
  digest: ConfigDigest;
  /** Highest purge sequence applied. */
  purgeSequence: bigint;
  heartbeatIntervalMs: number;
}

export function createAgentState(nodeId: string = randomUUID()): AgentState {
  return { nodeId, configVersion: 0n, resources: new Map(), digest: new ConfigDigest(), purgeSequence: 0n, heartbeatIntervalMs: 0 };
}

export function helloFor(state: AgentState, region = 'bench'): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: {
      case: 'hello',
      value: {
        nodeId: state.nodeId, hostname: `sim-${state.nodeId.slice(0, 8)}`, region, agentVersion: 'sim-agent/1',
        // A simulated agent caches nothing: like a real agent with an empty cache it says so, and is sent only
        // the purges still open rather than the platform's whole history.
        configVersion: state.configVersion, purgeSequence: state.purgeSequence, cacheEmpty: true,
      },
    },
  });
}

export function heartbeatFor(state: AgentState): ConnectRequest {
  return create(ConnectRequestSchema, {
    message: { case: 'heartbeat', value: { status: 'ok', configVersion: state.configVersion, purgeSequence: state.purgeSequence, cacheObjects: 0n, cacheBytes: 0n } },
  });
}

const ack = (value: MessageInitShape<typeof AckSchema>): ConnectRequest => create(ConnectRequestSchema, { message: { case: 'ack', value } });

/** Applies a configuration push to the state (all or nothing); the error text when it cannot be applied. */
function applyConfig(state: AgentState, update: ConfigUpdate): string | null {
  if (!update.full && update.baseVersion !== state.configVersion) {
    return `${BASE_MISMATCH} delta on base version ${update.baseVersion}, but version ${state.configVersion} is held`;
  }
  const resources = update.full ? new Map<string, string>() : new Map(state.resources);
  const digest = update.full ? new ConfigDigest() : state.digest.clone();
  const decoder = new TextDecoder('utf-8', { fatal: true });
  for (const key of update.removed) {
    const before = resources.get(key);
    if (before === undefined) return `${BASE_MISMATCH} removes ${key}, which this agent does not hold`;
    resources.delete(key);
    digest.replace(key, before, null);
  }
  for (const resource of update.resources) {
    if (sha256Hex(resource.body) !== resource.sha256) return `resource ${resource.key}: body does not match its sha256`;
    try {
      JSON.parse(decoder.decode(resource.body)); // the decode a real agent does before it serves the entry
    } catch {
      return `resource ${resource.key}: body is not valid UTF-8 JSON`;
    }
    digest.replace(resource.key, resources.get(resource.key) ?? null, resource.sha256);
    resources.set(resource.key, resource.sha256);
  }
  // Like the real agent (edge-agent/src/control/resource-set.ts): a delta that does not add up is a base mismatch
  // (the control plane answers it with a full push), a full push that does not is refused.
  const mismatch = update.full ? 'digest_mismatch:' : BASE_MISMATCH;
  if (update.resourceCount && resources.size !== update.resourceCount) return `${mismatch} holds ${resources.size} resources after the push, expected ${update.resourceCount}`;
  if (update.digest && digest.hex() !== update.digest) return `${mismatch} configuration digest differs after the push`;
  state.resources = resources;
  state.digest = digest;
  state.configVersion = update.version;
  return null;
}

/**
 * What the agent sends back for one message of the control plane: an Ack for
 * every push (a nack, keeping the previous configuration, when a configuration
 * cannot be applied), nothing for a Welcome.
 */
export function answer(state: AgentState, response: ConnectResponse): ConnectRequest | undefined {
  const m = response.message;
  switch (m.case) {
    case 'welcome':
      state.heartbeatIntervalMs = m.value.heartbeatIntervalMs;
      if (m.value.purgeSequence > state.purgeSequence) state.purgeSequence = m.value.purgeSequence;
      return undefined;
    case 'configUpdate': {
      const error = applyConfig(state, m.value);
      return ack({ kind: AckKind.CONFIG, version: m.value.version, nonce: m.value.nonce, ok: error === null, error: error ?? '' });
    }
    case 'purge':
      // Purges arrive in sequence order; one already applied is acknowledged again (idempotent).
      if (m.value.sequence > state.purgeSequence) state.purgeSequence = m.value.sequence;
      return ack({ kind: AckKind.PURGE, id: m.value.purgeId, version: m.value.sequence, nonce: m.value.nonce, ok: true });
    case 'prefetchJob':
      return ack({ kind: AckKind.PREFETCH, id: m.value.jobId, nonce: m.value.nonce, ok: true, fetched: m.value.urls.length, failed: 0 });
    default:
      return undefined;
  }
}

/**
 * One process simulates many agents on one core, where real agents verify their own copy each, in parallel.
 * So that the simulation does not measure itself (a 100-endpoint delta costs an agent about 2 ms of decoding,
 * SHA-256 and JSON checks and digest updates: 400 ms for 200 agents on one core), a configuration push is
 * decoded and verified once per process and base: an agent whose bytes are identical, compared in full, to a
 * push already verified from the same base (version and digest) takes that outcome. Different bytes, or another
 * base, are decoded and verified again. The outcomes are immutable (applyConfig copies before it changes).
 */
export class SharedPushes {
  /** Recent large messages by length (configuration pushes): the raw bytes and their decoding. */
  readonly #decoded = new Map<number, { raw: Uint8Array; message: ConnectResponse }>();
  readonly #outcomes = new WeakMap<ConfigUpdate, Map<string, { error: string | null; after?: Pick<AgentState, 'configVersion' | 'resources' | 'digest'> }>>();
  static readonly MIN_BYTES = 1024;

  decode(raw: Uint8Array): ConnectResponse {
    if (raw.length < SharedPushes.MIN_BYTES) return fromBinary(ConnectResponseSchema, raw);
    const seen = this.#decoded.get(raw.length);
    if (seen && Buffer.compare(seen.raw, raw) === 0) return seen.message;
    const message = fromBinary(ConnectResponseSchema, raw);
    if (message.message.case === 'configUpdate') {
      if (this.#decoded.size >= 16) this.#decoded.delete(this.#decoded.keys().next().value!);
      this.#decoded.set(raw.length, { raw: Uint8Array.from(raw), message });
    }
    return message;
  }

  /** answer(), sharing the verification of a configuration push between agents on the same base. */
  answer(state: AgentState, response: ConnectResponse): ConnectRequest | undefined {
    const m = response.message;
    if (m.case !== 'configUpdate') return answer(state, response);
    let byBase = this.#outcomes.get(m.value);
    if (!byBase) this.#outcomes.set(m.value, (byBase = new Map()));
    const base = `${state.configVersion}|${state.digest.hex()}|${state.resources.size}`;
    let outcome = byBase.get(base);
    if (!outcome) {
      const error = applyConfig(state, m.value);
      outcome = { error, after: error === null ? { configVersion: state.configVersion, resources: state.resources, digest: state.digest } : undefined };
      byBase.set(base, outcome);
    } else if (outcome.after) {
      state.configVersion = outcome.after.configVersion;
      state.resources = outcome.after.resources;
      state.digest = outcome.after.digest;
    }
    return ack({ kind: AckKind.CONFIG, version: m.value.version, nonce: m.value.nonce, ok: outcome.error === null, error: outcome.error ?? '' });
  }
}

/** The key a push is reported under: "config:<version>", "purge:<purge id>", "prefetch:<job id>". */
export function pushKey(response: ConnectResponse): { kind: string; key: string; full?: boolean } | undefined {
  const m = response.message;
  if (m.case === 'configUpdate') return { kind: 'config', key: String(m.value.version), full: m.value.full };
  if (m.case === 'purge') return { kind: 'purge', key: m.value.purgeId || String(m.value.sequence) };
  if (m.case === 'prefetchJob') return { kind: 'prefetch', key: m.value.jobId };
  return undefined;
}

// ---- the process: N streams ------------------------------------------------------

interface Options {
  target: string;
  n: number;
  token: string;
  heartbeatMs: number;
  batch: number;
  reportAcks: boolean;
  connectionPerClient: boolean;
  verifyEach: boolean;
  region: string;
}

function parseOptions(argv: string[]): Options {
  const value = (name: string, fallback: string) => {
    const i = argv.indexOf(`--${name}`);
    return i === -1 ? fallback : argv[i + 1]!;
  };
  return {
    target: value('target', '127.0.0.1:8081'),
    n: Number(value('n', '50')),
    token: value('token', process.env.SIM_AGENT_TOKEN ?? 'agt_bench'),
    heartbeatMs: Number(value('heartbeat-ms', '0')),
    batch: Number(value('batch', '100')),
    reportAcks: argv.includes('--report-acks'),
    connectionPerClient: !argv.includes('--shared-connection'),
    verifyEach: argv.includes('--verify-each'),
    region: value('region', 'bench'),
  };
}

/** What the client reads: the message's protobuf bytes (decoded by SharedPushes). */
interface Received { raw: Uint8Array; bytes: number }

interface PushTally { kind: string; count: number; nacks: number; firstReceivedAt: number; lastAckAt: number; bytes: number; maxBytes: number; full?: boolean; errors: string[] }

const CONNECT_TIMEOUT_MS = 60_000;

async function run(options: Options): Promise<void> {
  const send = (message: object) => process.send?.(message);
  const channelOptions: grpc.ChannelOptions = {
    // A full snapshot of 10,000 endpoints is far above grpc-js's default 4 MB receive limit.
    'grpc.max_receive_message_length': -1,
    // A bidi stream is never retried once it has its headers; the retry layer only buffers every message sent.
    'grpc.enable_retries': 0,
    // grpc-js shares one subchannel (one HTTP/2 connection) between channels of equal target and
    // options; a local pool per channel gives every agent its own connection, as real agents have.
    ...(options.connectionPerClient ? { 'grpc.use_local_subchannel_pool': 1 } : {}),
    // The window the real agent grants the control plane (edge-control.ts).
    'grpc-node.flow_control_window': CONTROL_FLOW_CONTROL_WINDOW_BYTES,
  };
  const { path, requestSerialize } = edgeControlService.connect;
  const deserialize = (bytes: Buffer): Received => ({ raw: bytes, bytes: bytes.length });
  // --verify-each: every agent decodes and verifies its own copy (the process's CPU then bounds configuration pushes).
  const pushes = options.verifyEach
    ? { decode: (raw: Uint8Array) => fromBinary(ConnectResponseSchema, raw), answer }
    : new SharedPushes();
  const shared = options.connectionPerClient ? undefined : new grpc.Client(options.target, grpc.credentials.createInsecure(), channelOptions);
  const clients: grpc.Client[] = shared ? [shared] : [];
  const calls: grpc.ClientDuplexStream<ConnectRequest, Received>[] = [];
  const timers: NodeJS.Timeout[] = [];
  const tallies = new Map<string, PushTally>();
  let connected = 0;
  let ended = 0;
  let closing = false;

  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${options.token}`);

  function tally(key: { kind: string; key: string; full?: boolean }, received: number, bytes: number, reply: ConnectRequest | undefined): void {
    const id = `${key.kind}:${key.key}`;
    let t = tallies.get(id);
    if (!t) tallies.set(id, (t = { kind: key.kind, count: 0, nacks: 0, firstReceivedAt: received, lastAckAt: 0, bytes: 0, maxBytes: 0, full: key.full, errors: [] }));
    t.count++;
    t.bytes += bytes;
    if (bytes > t.maxBytes) t.maxBytes = bytes;
    if (received < t.firstReceivedAt) t.firstReceivedAt = received;
    t.lastAckAt = wallNow();
    if (reply?.message.case === 'ack' && !reply.message.value.ok) {
      t.nacks++;
      if (t.errors.length < 3) t.errors.push(reply.message.value.error);
    }
    if (t.count >= options.n) {
      tallies.delete(id);
      const { errors, ...rest } = t;
      send({ type: 'acked', key: key.key, ...rest, errors });
    }
  }

  function open(): Promise<void> {
    const state = createAgentState();
    const client = shared ?? new grpc.Client(options.target, grpc.credentials.createInsecure(), channelOptions);
    if (!shared) clients.push(client);
    const call = client.makeBidiStreamRequest(path, requestSerialize, deserialize, metadata, {});
    calls.push(call);
    return new Promise<void>((resolve, reject) => {
      let welcomed = false;
      call.on('data', ({ raw, bytes }: Received) => {
        const received = options.reportAcks ? wallNow() : 0;
        const message = pushes.decode(raw);
        const reply = pushes.answer(state, message);
        if (reply) call.write(reply);
        if (message.message.case === 'welcome' && !welcomed) {
          welcomed = true;
          connected++;
          const interval = options.heartbeatMs || 0;
          if (interval > 0) {
            // Each agent beats on its own timer, started at a random phase.
            timers.push(setTimeout(() => {
              call.write(heartbeatFor(state));
              timers.push(setInterval(() => call.write(heartbeatFor(state)), interval));
            }, Math.random() * interval));
          }
          resolve();
          return;
        }
        if (options.reportAcks) {
          const key = pushKey(message);
          if (key) tally(key, received, bytes, reply);
        }
      });
      const finish = (reason: string) => {
        if (!welcomed) reject(new Error(`stream ended before its Welcome: ${reason}`));
        if (closing) return;
        ended++;
        send({ type: 'ended', count: ended, reason });
      };
      call.on('error', (error: grpc.ServiceError) => finish(`${error.code} ${error.details}`));
      call.on('end', () => finish('end'));
      call.write(helloFor(state, options.region));
    });
  }

  function close(): never {
    closing = true;
    for (const timer of timers) clearTimeout(timer);
    for (const call of calls) call.cancel();
    for (const client of clients) client.close();
    process.exit(0);
  }

  process.on('message', (message: { type: string }) => {
    if (message.type === 'close') close();
    else if (message.type === 'usage') {
      const usage = process.cpuUsage();
      send({ type: 'usage', cpuMs: (usage.user + usage.system) / 1000, rss: process.memoryUsage.rss() });
    } else if (message.type === 'pending') {
      send({ type: 'pending', connected, pushes: [...tallies.entries()].map(([id, t]) => ({ id, count: t.count, nacks: t.nacks, errors: t.errors })) });
    }
  });
  process.on('disconnect', close);
  process.on('SIGTERM', close);

  const started = performance.now();
  const deadline = setTimeout(() => {
    send({ type: 'error', message: `only ${connected} of ${options.n} streams welcomed after ${CONNECT_TIMEOUT_MS / 1000} s` });
    close();
  }, CONNECT_TIMEOUT_MS);
  try {
    // Opened in batches, each waited for: a burst of 1,000 connections overflows a default listen backlog.
    for (let i = 0; i < options.n; i += options.batch) {
      await Promise.all(Array.from({ length: Math.min(options.batch, options.n - i) }, open));
    }
  } catch (error) {
    send({ type: 'error', message: (error as Error).message });
    close();
  }
  clearTimeout(deadline);
  send({ type: 'connected', n: connected, ms: performance.now() - started, host: os.hostname() });
}

if (import.meta.main) await run(parseOptions(process.argv.slice(2)));
