// Pieces for tests of the edge control channel: an in-test ConfigSource built
// from resources (as the configuration side publishes them), an agent-token
// verifier holding a few tokens, the channel's writer with the purge feed's
// acks mounted (for the tests of its timing), and a test agent: a real
// @grpc/grpc-js client stream on its own connection, speaking the protocol
// by hand.
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import {
  AckKind, ConnectRequestSchema, HeartbeatSchema, type ConfigUpdate, type ConnectResponse, type Purge, type PrefetchJob, type ShieldMap, type Welcome,
} from '../../shared/gen/edge/v1/control_pb.ts';
import { configDigest, encodeResource, type EncodedResource } from '../../shared/src/config/resources.ts';
import { edgeControlService } from '../../shared/src/proto/edge-control.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { CONFIG_PUBLISHED_CHANNEL, type ConfigSource, type ManifestEntry, type PublishedVersion } from '../../control-plane/src/cdn-config/index.ts';
import type { AgentTokenVerifier } from '../../control-plane/src/edge-channel/index.ts';
// The channel's writer and the purge feed's acks are the channel's own parts, reached directly for the tests of their timing.
import { PurgeAckBuffer } from '../../control-plane/src/edge-channel/channel-purge-feed.ts';
import type { PurgeAckRow } from '../../control-plane/src/edge-channel/channel-purges.ts';
import { ChannelWriter as Writer, type ChannelWriterOptions, type PartBatch } from '../../control-plane/src/edge-channel/channel-writer.ts';
import type { KeyValueStore } from '../../control-plane/src/store/index.ts';

/** Published versions kept in memory; a resource's version is the version in which its body last changed. */
export class TestConfigSource implements ConfigSource {
  readonly versions = new Map<number, PublishedVersion>();
  readonly bodyStore = new Map<string, Uint8Array>();
  activeVersion = 0;
  /** bodies() calls and the number of shas asked (to show encodings are shared). */
  bodyCalls = 0;

  /** Makes `resources` the next active version and returns it (announce it with announceConfig). */
  publish(resources: EncodedResource[]): PublishedVersion {
    const number = Math.max(0, ...this.versions.keys()) + 1;
    const previous = this.versions.get(this.activeVersion);
    const manifest = new Map<string, ManifestEntry>();
    for (const r of resources) {
      const before = previous?.manifest.get(r.key);
      manifest.set(r.key, { version: before && before.sha256 === r.sha256 ? before.version : number, sha256: r.sha256 });
      this.bodyStore.set(r.sha256, r.body);
    }
    const version: PublishedVersion = { id: randomUUID(), version: number, manifest, digest: configDigest([...manifest].map(([k, e]) => [k, e.sha256])) };
    this.versions.set(number, version);
    this.activeVersion = number;
    return version;
  }

  async active() {
    return this.versions.get(this.activeVersion) ?? null;
  }

  async version(n: number) {
    return this.versions.get(n) ?? null;
  }

  async bodies(shas: readonly string[]) {
    this.bodyCalls++;
    const out = new Map<string, Uint8Array>();
    for (const sha of shas) {
      const body = this.bodyStore.get(sha);
      if (body) out.set(sha, body);
    }
    return out;
  }
}

/** An endpoint resource with a body that differs by `revision`. */
export function endpointResource(id: string, revision = 1): EncodedResource {
  const entry = { id, name: `endpoint ${id.slice(0, 8)}`, hostname: `${id.slice(0, 8)}.edge.test`, revision };
  return encodeResource('endpoint', entry);
}

export function policyResource(id: string, revision = 1): EncodedResource {
  const entry = { id, name: `policy ${id.slice(0, 8)}`, revision };
  return encodeResource('response_headers_policy', entry);
}

export async function announceConfig(store: KeyValueStore, version: PublishedVersion): Promise<void> {
  await store.publish(CONFIG_PUBLISHED_CHANNEL, JSON.stringify({ version: version.version }));
}

/**
 * The channel's writer (channel-writer.ts) with the purge feed's acknowledgements mounted as the channel
 * mounts them, and `hooks.configOrFleetChanged` run after each flush that saw nodes come or go.
 */
export class ChannelWriter extends Writer {
  readonly #acks: PurgeAckBuffer;

  constructor(options: ChannelWriterOptions & { hooks?: { configOrFleetChanged(em: EntityManager): Promise<void> } }) {
    super(options);
    this.#acks = new PurgeAckBuffer(this);
    const hooks = options.hooks;
    if (hooks) {
      this.add({
        urgent: false,
        routine: false,
        take: (_routine, fleet): PartBatch | null => (fleet.changed ? { write: (em) => hooks.configOrFleetChanged(em), putBack: () => {} } : null),
      });
    }
  }

  purgeAck(ack: PurgeAckRow): void {
    this.#acks.add(ack);
  }

  expectAcks(purgeId: string, streams: number): void {
    this.#acks.expect(purgeId, streams);
  }
}

/** A verifier of the tokens given (token → token id). */
export function testTokens(tokens: Record<string, string>): AgentTokenVerifier {
  return { verify: async (token) => (tokens[token] ? { id: tokens[token] } : null) };
}

type Kind = 'welcome' | 'configUpdate' | 'purge' | 'prefetchJob' | 'shieldMap';
type ValueOf<K extends Kind> = K extends 'welcome' ? Welcome : K extends 'configUpdate' ? ConfigUpdate : K extends 'purge' ? Purge
  : K extends 'shieldMap' ? ShieldMap : PrefetchJob;

export interface HelloInit {
  nodeId?: string;
  hostname?: string;
  region?: string;
  agentVersion?: string;
  configVersion?: number;
  purgeSequence?: number;
  cacheEmpty?: boolean;
  acceptsCacheReset?: boolean;
  /** Origin shield (issue 23 item 5). */
  shieldAddress?: string;
  regionName?: string;
  regionCountryCode?: string;
  regionCity?: string;
}

const WAIT_MS = 20_000;

/** One agent's stream, driven by hand. */
export class TestAgent {
  readonly nodeId: string;
  readonly client: grpc.Client;
  readonly call: grpc.ClientDuplexStream<unknown, ConnectResponse>;
  /** Every message received, in order. */
  readonly received: ConnectResponse[] = [];
  /** The status the stream ended with (resolves when it ends). */
  readonly status: Promise<grpc.StatusObject>;
  ended = false;
  #cursor = new Map<Kind, number>();
  #waiters = new Set<() => void>();

  constructor(port: number, token: string | null, nodeId: string = randomUUID()) {
    this.nodeId = nodeId;
    // A local subchannel pool: each agent gets its own connection, as real agents have.
    this.client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    const metadata = new grpc.Metadata();
    if (token !== null) metadata.set('authorization', `Bearer ${token}`);
    const { path, requestSerialize, responseDeserialize } = edgeControlService.connect;
    this.call = this.client.makeBidiStreamRequest(path, requestSerialize as (value: unknown) => Buffer, responseDeserialize, metadata);
    this.call.on('data', (message: ConnectResponse) => {
      this.received.push(message);
      for (const wake of this.#waiters) wake();
    });
    this.call.on('error', () => {});
    this.status = new Promise((resolve) => this.call.on('status', (status) => {
      this.ended = true;
      for (const wake of this.#waiters) wake();
      resolve(status);
    }));
  }

  send(message: MessageInitShape<typeof ConnectRequestSchema>['message']): void {
    this.call.write(create(ConnectRequestSchema, { message } as never));
  }

  hello(init: HelloInit = {}): void {
    this.send({
      case: 'hello',
      value: {
        nodeId: init.nodeId ?? this.nodeId, hostname: init.hostname ?? `edge-${this.nodeId.slice(0, 8)}`, region: init.region ?? 'eu-west',
        agentVersion: init.agentVersion ?? '1.0.0', configVersion: BigInt(init.configVersion ?? 0), purgeSequence: BigInt(init.purgeSequence ?? 0),
        cacheEmpty: init.cacheEmpty ?? false, acceptsCacheReset: init.acceptsCacheReset ?? false,
        shieldAddress: init.shieldAddress ?? '', regionName: init.regionName ?? '', regionCountryCode: init.regionCountryCode ?? '', regionCity: init.regionCity ?? '',
      },
    });
  }

  /** The next message of this kind not yet taken (waits for it). */
  async next<K extends Kind>(kind: K, timeoutMs = WAIT_MS): Promise<ValueOf<K>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const from = this.#cursor.get(kind) ?? 0;
      const index = this.received.findIndex((m, i) => i >= from && m.message.case === kind);
      if (index >= 0) {
        this.#cursor.set(kind, index + 1);
        return this.received[index]!.message.value as ValueOf<K>;
      }
      if (this.ended) throw new Error(`stream ended while waiting for ${kind}`);
      if (Date.now() > deadline) throw new Error(`no ${kind} within ${timeoutMs} ms (received: ${this.received.map((m) => m.message.case).join(', ')})`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, 50);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.#waiters.add(done);
      }).finally(() => this.#waiters.clear());
    }
  }

  /** The kinds received so far, in order. */
  kinds(): string[] {
    return this.received.map((m) => m.message.case ?? '');
  }

  ackConfig(update: ConfigUpdate, ok = true, error = ''): void {
    this.send({ case: 'ack', value: { kind: AckKind.CONFIG, version: update.version, nonce: update.nonce, ok, error } });
  }

  ackPurge(purge: Purge, ok = true, error = ''): void {
    this.send({ case: 'ack', value: { kind: AckKind.PURGE, id: purge.purgeId, version: purge.sequence, nonce: purge.nonce, ok, error } });
  }

  ackPrefetch(job: PrefetchJob, result: { ok?: boolean; error?: string; fetched?: number; failed?: number; failedUrls?: { url: string; reason: string }[] } = {}): void {
    this.send({
      case: 'ack',
      value: {
        kind: AckKind.PREFETCH, id: job.jobId, nonce: job.nonce, ok: result.ok ?? true, error: result.error ?? '',
        fetched: result.fetched ?? job.urls.length - (result.failedUrls?.length ?? 0), failed: result.failed ?? result.failedUrls?.length ?? 0,
        failedUrls: result.failedUrls ?? [],
      },
    });
  }

  heartbeat(value: MessageInitShape<typeof HeartbeatSchema>): void {
    this.send({ case: 'heartbeat', value });
  }

  /** Cancels the stream (as a dying agent's connection does) and closes the client. */
  close(): void {
    this.call.cancel();
    this.client.close();
  }
}

/** Connects an agent and says Hello; waits for Welcome. */
export async function connectAgent(port: number, token: string, hello: HelloInit = {}): Promise<{ agent: TestAgent; welcome: Welcome }> {
  const agent = new TestAgent(port, token, hello.nodeId);
  agent.hello(hello);
  const welcome = await agent.next('welcome');
  return { agent, welcome };
}

interface Teardown { teardown(fn: () => unknown): void }

/** Connects agents to one channel with one token; every agent is closed at the end of the test. */
export function agentConnector(t: Teardown, port: number, token: string) {
  const agents: TestAgent[] = [];
  t.teardown(() => agents.forEach((agent) => agent.close()));
  return {
    agents,
    /** Connects, says Hello, waits for Welcome. */
    async connect(hello: HelloInit = {}) {
      const connected = await connectAgent(port, token, hello);
      agents.push(connected.agent);
      return connected;
    },
    /** An agent that has not said anything yet (another token, or none). */
    raw(otherToken: string | null = token) {
      const agent = new TestAgent(port, otherToken);
      agents.push(agent);
      return agent;
    },
  };
}
