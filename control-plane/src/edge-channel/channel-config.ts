// Configuration pushes (DESIGN.md §7; issue 12 items 3 and 4), incremental as
// delta xDS is: a node that applied a version the configuration side still
// knows gets only the resources whose sha256 changed since (plus the keys
// removed), a node with nothing (or a version that cannot be diffed from) the
// whole configuration. Each (base → target) push is encoded once and the same
// bytes, nonce included, go to every stream on that base: the ack names the
// version, which identifies the push with the nonce.
//
// One push per stream is in flight; the next is diffed from what its ack
// confirms. An ack moves the node's applied version; a nack records the
// refused version and its error, and that version is not pushed on that
// stream again (the next publish supersedes it); a node that reconnects is
// offered the active version again (issue 21 item 8: restarted with a larger
// MAX_ENDPOINTS, say, it takes it). A nack whose error starts with
// `base_mismatch:` (the agent does not hold the base, or its digest differs
// after applying) is answered once with a full push.
//
// As a feed of the session layer (channel-feed.ts), configuration adds the
// active version to Welcome, pushes what the agent lacks when its stream
// opens and after each publish (CONFIG_PUBLISHED_CHANNEL, and every tick),
// takes the CONFIG acks, and owns the node columns config_version,
// failed_config_version and config_error. After a flush that recorded an
// applied or refused version, or that changed which nodes are online,
// endpoints deploying → active and the version's propagation are reconciled.
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { AckKind, ConnectResponseSchema, type Ack, type Hello } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { agentText, safeNumber, type ChannelContext, type Feed, type WelcomeFields } from './channel-feed.ts';
import type { AgentStream } from './channel-stream.ts';
import type { FleetChange, PartBatch, WriterPart } from './channel-writer.ts';
import { CONFIG_PUBLISHED_CHANNEL, type ConfigSource, type PublishedVersion } from '../cdn-config/index.ts';
import { reconcileDeployments } from './nodes-service.ts';

/** The prefix of Ack.error by which an agent asks for a full push instead of a delta (agreed with the agent). */
export const BASE_MISMATCH_PREFIX = 'base_mismatch:';

export interface EncodedConfigPush {
  version: number;
  nonce: string;
  full: boolean;
  bytes: Uint8Array;
  /** Resources carried (all of them when full). */
  resources: number;
}

export interface ConfigAckOutcome {
  /** The node applied `version`. */
  applied?: number;
  /** The node refused `version` with `error`. */
  refused?: { version: number; error: string };
}

/** How many encodings of the current target are kept (one per base version still held by some node). */
const MAX_ENCODINGS = 32;

export interface InflightConfig {
  version: number;
  nonce: string;
  full: boolean;
  /** When it was written to the stream (performance.now(), for the ack latency). */
  sentAt?: number;
}

/** What the configuration feed keeps for one stream. */
export interface ConfigState {
  readonly stream: AgentStream;
  /** The version the node applied (Hello, then acks). */
  applied: number;
  /** The highest version the node refused: nothing up to it is pushed again. */
  failed: number;
  /** The push awaiting its ack (one at a time; the next is diffed from what the ack confirms). */
  inflight: InflightConfig | null;
  /** A push is being prepared (encoding in progress). */
  preparing: boolean;
  /** Versions already answered with a full push after a base_mismatch nack (once each). */
  fullRetried: Set<number>;
}

export class ConfigPusher {
  readonly #source: () => ConfigSource | undefined;
  readonly #log: Logger;
  #target: PublishedVersion | null = null;
  #encodings = new Map<string, Promise<EncodedConfigPush>>();

  constructor(source: () => ConfigSource | undefined, log: Logger) {
    this.#source = source;
    this.#log = log;
  }

  get target(): PublishedVersion | null {
    return this.#target;
  }

  /** Reads the active version; a new one replaces the target (and drops the old target's encodings). True when it changed. */
  async refresh(): Promise<boolean> {
    const source = this.#source();
    if (!source) return false;
    const active = await source.active();
    if ((active?.version ?? 0) === (this.#target?.version ?? 0)) return false;
    this.#target = active;
    this.#encodings = new Map();
    return true;
  }

  /** Pushes the target to the stream if it lacks it and has not refused it, and nothing is in flight. */
  async sync(state: ConfigState): Promise<void> {
    const target = this.#target;
    if (!target || state.stream.closed || state.inflight || state.preparing) return;
    if (target.version === state.applied || target.version <= state.failed) return;
    await this.#push(state, target, false);
  }

  async #push(state: ConfigState, target: PublishedVersion, forceFull: boolean): Promise<void> {
    const { stream } = state;
    state.preparing = true;
    try {
      const base = forceFull || state.applied === 0 || state.applied >= target.version ? null : await this.#source()!.version(state.applied);
      const push = await this.encoding(base, target);
      if (stream.closed) return;
      state.inflight = { version: push.version, nonce: push.nonce, full: push.full, sentAt: performance.now() };
      if (push.full) state.fullRetried.add(push.version);
      stream.write(push.bytes);
    } catch (error) {
      this.#log.error({ err: error, node_id: stream.nodeId, version: target.version }, 'configuration push not prepared');
    } finally {
      state.preparing = false;
    }
  }

  /** The push from `base` (null: full) to `target`, encoded once per pair while `target` is the target. */
  encoding(base: PublishedVersion | null, target: PublishedVersion): Promise<EncodedConfigPush> {
    const key = `${base?.version ?? 'full'}>${target.version}`;
    const cache = target === this.#target ? this.#encodings : new Map<string, Promise<EncodedConfigPush>>();
    let found = cache.get(key);
    if (!found) {
      if (cache.size >= MAX_ENCODINGS) cache.delete(cache.keys().next().value!);
      found = this.#encode(base, target);
      cache.set(key, found);
      // A failed encoding is not kept: the next attempt tries again.
      found.catch(() => cache.get(key) === found && cache.delete(key));
    }
    return found;
  }

  async #encode(base: PublishedVersion | null, target: PublishedVersion): Promise<EncodedConfigPush> {
    const changed: [string, { version: number; sha256: string }][] = [];
    for (const [key, entry] of target.manifest) {
      if (base?.manifest.get(key)?.sha256 !== entry.sha256) changed.push([key, entry]);
    }
    const removed = base ? [...base.manifest.keys()].filter((key) => !target.manifest.has(key)) : [];
    const shas = [...new Set(changed.map(([, entry]) => entry.sha256))];
    const bodies = shas.length ? await this.#source()!.bodies(shas) : new Map<string, Uint8Array>();
    const missing = shas.filter((sha) => !bodies.has(sha));
    if (missing.length) throw new Error(`configuration version ${target.version}: ${missing.length} resource bodies missing (e.g. ${missing[0]})`);
    const nonce = randomUUID();
    const bytes = encodeResponse(create(ConnectResponseSchema, {
      message: {
        case: 'configUpdate',
        value: {
          version: BigInt(target.version), nonce, full: !base, baseVersion: BigInt(base?.version ?? 0),
          resources: changed.map(([key, entry]) => ({ key, version: BigInt(entry.version), body: bodies.get(entry.sha256)!, sha256: entry.sha256 })),
          removed, digest: target.digest, resourceCount: target.manifest.size,
        },
      },
    }));
    return { version: target.version, nonce, full: !base, bytes, resources: changed.length };
  }

  /**
   * Applies an agent's answer to its in-flight push. An answer that matches no push in flight (another
   * version or nonce) changes nothing. Returns what to record; the caller then syncs the stream again.
   */
  answer(state: ConfigState, ack: { version: number; nonce: string; ok: boolean; error: string }): ConfigAckOutcome | null {
    const inflight = state.inflight;
    if (!inflight || inflight.version !== ack.version || inflight.nonce !== ack.nonce) return null;
    state.inflight = null;
    if (ack.ok) {
      state.applied = ack.version;
      return { applied: ack.version };
    }
    if (ack.error.startsWith(BASE_MISMATCH_PREFIX) && !inflight.full && !state.fullRetried.has(ack.version) && this.#target) {
      // The agent cannot apply a delta on what it holds: the whole configuration, once.
      void this.#push(state, this.#target, true);
      return {};
    }
    state.failed = Math.max(state.failed, ack.version);
    return { refused: { version: ack.version, error: ack.error } };
  }
}

/**
 * After a flush that recorded an applied or refused version (`changed`), or that changed which nodes are
 * online: endpoints deploying → active and the active version's propagation (nodes-service.ts).
 */
class DeploymentsToReconcile implements WriterPart {
  readonly #source: () => ConfigSource | undefined;
  changed = false;

  constructor(source: () => ConfigSource | undefined) {
    this.#source = source;
  }

  get urgent(): boolean {
    return this.changed;
  }

  get routine(): boolean {
    return false;
  }

  take(_routine: boolean, fleet: FleetChange): PartBatch | null {
    if (!this.changed && !fleet.changed) return null;
    const changed = this.changed;
    this.changed = false;
    return {
      write: async (em: EntityManager, now: Date) => {
        const source = this.#source();
        if (source) await reconcileDeployments(em, source, now);
      },
      putBack: () => {
        this.changed ||= changed;
      },
    };
  }
}

/** The configuration feed of the control channel (see the header). */
export class ConfigFeed implements Feed<ConfigState> {
  readonly name = 'configuration';
  readonly ackKinds = [AckKind.CONFIG];
  readonly node = {
    columns: {
      config_version: { type: 'bigint', merge: 'latest' },
      // Cleared once the node applies that version or a later one (then it no longer refuses anything).
      failed_config_version: { type: 'bigint', merge: 'max', clearedBy: 'config_version' },
      config_error: { type: 'text', merge: 'nullable' },
    },
    fromHello: (hello: Hello) => ({ config_version: Number(hello.configVersion) }),
  } as const;
  readonly subjects: Feed['subjects'];
  readonly pusher: ConfigPusher;
  readonly #context: ChannelContext;
  readonly #states = new Set<ConfigState>();
  readonly #reconcile: DeploymentsToReconcile;

  constructor(context: ChannelContext, source: () => ConfigSource | undefined) {
    this.#context = context;
    this.pusher = new ConfigPusher(source, context.log);
    this.#reconcile = context.writer.add(new DeploymentsToReconcile(source));
    this.subjects = { [CONFIG_PUBLISHED_CHANNEL]: () => void context.safely('configuration push', () => this.#pushAll()) };
  }

  start(): void {
    void this.#context.safely('reading the active configuration', () => this.pusher.refresh());
  }

  helloProblem(hello: Hello): string | null {
    return safeNumber(hello.configVersion) === null ? 'config_version is out of range' : null;
  }

  /** A new stream starts with no refusal: a node that refused a version is offered it again when it reconnects (it may have been fixed). */
  attach(stream: AgentStream, hello: Hello): ConfigState {
    const state: ConfigState = { stream, applied: Number(hello.configVersion), failed: 0, inflight: null, preparing: false, fullRetried: new Set() };
    this.#states.add(state);
    return state;
  }

  detach(_stream: AgentStream, state: ConfigState): void {
    this.#states.delete(state);
  }

  async welcome(): Promise<WelcomeFields> {
    if (!this.pusher.target) await this.pusher.refresh();
    return { configVersion: BigInt(this.pusher.target?.version ?? 0) };
  }

  open(_stream: AgentStream, state: ConfigState): Promise<void> {
    return this.pusher.sync(state);
  }

  onAck(stream: AgentStream, state: ConfigState, ack: Ack, version: number): void {
    const sentAt = state.inflight?.sentAt;
    const outcome = this.pusher.answer(state, { version, nonce: ack.nonce, ok: ack.ok, error: ack.error });
    if (!outcome) return;
    if (sentAt !== undefined) this.#context.metrics.configAcked((performance.now() - sentAt) / 1000, ack.ok);
    const { writer } = this.#context;
    if (outcome.applied !== undefined) {
      writer.node(stream, { config_version: outcome.applied, config_error: null }, true);
      this.#reconcile.changed = true;
    }
    if (outcome.refused) {
      const error = agentText(outcome.refused.error) || 'refused without a reason';
      writer.node(stream, { failed_config_version: outcome.refused.version, config_error: error }, true);
      this.#reconcile.changed = true;
      this.#context.log.warn({ node_id: stream.nodeId, version: outcome.refused.version, error }, 'edge node refused a configuration version');
    }
    void this.#context.safely('configuration push', () => this.pusher.sync(state));
  }

  poll(): Promise<void> {
    return this.#pushAll();
  }

  /** Reads the active version and pushes it to every stream welcomed that lacks it. */
  async #pushAll(): Promise<void> {
    await this.pusher.refresh();
    for (const state of this.#states) if (state.stream.welcomed) void this.#context.safely('configuration push', () => this.pusher.sync(state));
  }
}
