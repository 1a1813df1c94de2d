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
// refused version and its error, and that version is never pushed to the node
// again (the next publish supersedes it). A nack whose error starts with
// `base_mismatch:` (the agent does not hold the base, or its digest differs
// after applying) is answered once with a full push.
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { Logger } from 'pino';
import { ConnectResponseSchema } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import type { AgentStream } from './channel-stream.ts';
import type { ConfigSource, PublishedVersion } from './contracts.ts';

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
  async sync(stream: AgentStream): Promise<void> {
    const target = this.#target;
    const state = stream.config;
    if (!target || stream.closed || state.inflight || state.preparing) return;
    if (target.version === state.applied || target.version <= state.failed) return;
    await this.#push(stream, target, false);
  }

  async #push(stream: AgentStream, target: PublishedVersion, forceFull: boolean): Promise<void> {
    const state = stream.config;
    state.preparing = true;
    try {
      const base = forceFull || state.applied === 0 || state.applied >= target.version ? null : await this.#source()!.version(state.applied);
      const push = await this.encoding(base, target);
      if (stream.closed) return;
      state.inflight = { version: push.version, nonce: push.nonce, full: push.full };
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
  answer(stream: AgentStream, ack: { version: number; nonce: string; ok: boolean; error: string }): ConfigAckOutcome | null {
    const state = stream.config;
    const inflight = state.inflight;
    if (!inflight || inflight.version !== ack.version || inflight.nonce !== ack.nonce) return null;
    state.inflight = null;
    if (ack.ok) {
      state.applied = ack.version;
      return { applied: ack.version };
    }
    if (ack.error.startsWith(BASE_MISMATCH_PREFIX) && !inflight.full && !state.fullRetried.has(ack.version) && this.#target) {
      // The agent cannot apply a delta on what it holds: the whole configuration, once.
      void this.#push(stream, this.#target, true);
      return {};
    }
    state.failed = Math.max(state.failed, ack.version);
    return { refused: { version: ack.version, error: ack.error } };
  }
}
