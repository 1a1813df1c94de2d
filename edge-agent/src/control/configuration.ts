// The configuration an agent process holds and how a new one is put in force:
// from a snapshot file, from a control-plane push (full or a delta on the
// version held), or restored from the data directory at start. Each is
// checked and compiled first, changing nothing (a bad one throws
// ConfigRefusedError), then installed in one assignment of the routing table:
// requests already running finish on the old table, new ones see the new one.
// What else follows a new configuration (log drains, certificates, origin
// pools, health probes) is the agent's, called through `installed`.
import type { Logger } from 'pino';
import { parseConfigSnapshot, type ConfigSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileRoutingTable, type RoutingTable } from '../proxy/routing.ts';
import type { ConfigStore } from './config-store.ts';
import { ConfigRefusedError, type ConfigPushResult } from './controlled-agent.ts';
import { ConfigPushError, ResourceSet, type ConfigPush, type ConfigSource, type StagedConfig } from './resource-set.ts';
import { SealError } from './sealing.ts';

/** A push checked and compiled, not yet in force (prepare, preparePush). */
export interface PreparedConfig {
  readonly staged: StagedConfig;
  readonly table: RoutingTable;
  /** The version it was prepared on. */
  readonly base: number;
}

export interface AgentConfigurationOptions {
  /** Where applied configurations and the purge sequence are kept (null: nowhere). */
  store: ConfigStore | null;
  logger: Logger;
  /** Most endpoints this node accepts (0: no limit): a larger configuration is refused whole. */
  maxEndpoints: number;
  /** Keep every resource body in memory once written (an agent with workers starts new ones from them: fullPush). */
  keepBodies: boolean;
  /** Called once a configuration is in force, with its snapshot and routing table. */
  installed: (snapshot: ConfigSnapshot, table: RoutingTable) => void;
}

const EMPTY_TABLE: RoutingTable = { version: 0, byHost: new Map(), byId: new Map(), origins: new Map() };

export class AgentConfiguration {
  #table: RoutingTable = EMPTY_TABLE;
  #snapshot: ConfigSnapshot | null = null;
  readonly #resources = new ResourceSet();
  readonly #o: AgentConfigurationOptions;

  constructor(options: AgentConfigurationOptions) {
    this.#o = options;
  }

  /** The compiled routing table in force (replaced whole by each install). */
  get table(): RoutingTable {
    return this.#table;
  }

  get snapshot(): ConfigSnapshot | null {
    return this.#snapshot;
  }

  /** The version to report to the control plane (Hello, heartbeats): 0 unless the configuration came from one. */
  get controlVersion(): number {
    return this.#resources.controlVersion;
  }

  /** Where the configuration in force came from. */
  get source(): ConfigSource {
    return this.#resources.source;
  }

  /**
   * Restores the last applied configuration from the data directory, and hands its purge sequence to
   * `purgeSequence`. Returns the version restored (0: none; a damaged, unreadable or oversized one is logged and
   * left aside until the control plane sends one).
   */
  restore(purgeSequence: (sequence: number) => void): number {
    const logger = this.#o.logger;
    let state;
    try {
      state = this.#o.store?.load();
    } catch (err) {
      if (err instanceof SealError) logger.warn({ err: err.message }, 'the persisted configuration cannot be opened with this agent token; starting without it until the control plane sends one');
      else logger.error({ err: (err as Error).message }, 'persisted configuration is damaged; starting without one');
      return 0;
    }
    if (!state) return 0;
    purgeSequence(state.purgeSequence);
    try {
      if (state.config !== null) {
        const { config } = state;
        const staged = this.#resources.stage({
          version: config.version, full: true, baseVersion: 0, resources: config.resources,
          removed: [], digest: config.digest, resourceCount: config.resources.length,
        });
        // The same limit as for a push or a file: a node restarted smaller does not serve more than it is sized for.
        if (this.#exceedsCapacity(staged.snapshot)) {
          logger.error({ version: config.version, endpoints: staged.snapshot.endpoints.length, max_endpoints: this.#o.maxEndpoints },
            `the persisted configuration holds more endpoints than this node's limit (MAX_ENDPOINTS): starting without it until the control plane sends one that fits`);
          return 0;
        }
        // The bodies are on disk already (unless found in clear: then they are written again, sealed).
        if (!config.needsReseal && !this.#o.keepBodies) for (const r of staged.resources.values()) r.body = null;
        this.#install({ ...staged, source: config.source }, compileRoutingTable(staged.snapshot), config.needsReseal);
        if (config.needsReseal) logger.info({ version: config.version }, 'the persisted configuration was stored in clear: sealing it');
        return config.version;
      }
      if (state.legacy !== null) {
        this.apply(state.legacy.snapshot, state.legacy.version);
        return state.legacy.version;
      }
    } catch (err) {
      logger.error({ err: (err as Error).message }, 'persisted configuration is invalid; starting without one');
    }
    return 0;
  }

  /** A snapshot (a file's): validated and compiled, then installed; a bad one throws ConfigRefusedError and changes nothing. */
  apply(input: unknown, version?: number, opts: { persist?: boolean } = {}): void {
    const prepared = this.prepare(input, version);
    this.#install(prepared.staged, prepared.table, opts.persist !== false);
    this.#o.logger.info({ version: prepared.staged.version, endpoints: prepared.staged.snapshot.endpoints.length }, 'configuration applied');
  }

  /** apply's first half (checks, parses and compiles, changing nothing; throws ConfigRefusedError); commitPush puts it in force. */
  prepare(input: unknown, version?: number): PreparedConfig {
    let snapshot: ConfigSnapshot;
    let table: RoutingTable;
    try {
      snapshot = parseConfigSnapshot(input);
      if (version !== undefined && version !== snapshot.version) snapshot = { ...snapshot, version };
      this.#checkCapacity(snapshot);
      table = compileRoutingTable(snapshot);
    } catch (err) {
      const detail = (err as { issues?: { path: PropertyKey[]; message: string }[] }).issues?.[0];
      const message = detail ? `${detail.path.join('.')}: ${detail.message}` : (err as Error).message;
      throw new ConfigRefusedError(`configuration refused: ${message}`, { cause: err });
    }
    return { staged: this.#resources.stageSnapshot(snapshot, 'file'), table, base: this.#resources.version };
  }

  /**
   * A push's first half: checks, parses only its new or changed resources and compiles only the endpoints that
   * changed, against the configuration held, changing nothing (throws ConfigRefusedError; message "base_mismatch:
   * ..." when the base is not the one held or the result does not match the digest). An agent with workers
   * prepares a push in every worker before any commits it.
   */
  preparePush(push: ConfigPush): PreparedConfig {
    try {
      const staged = this.#resources.stage(push);
      this.#checkCapacity(staged.snapshot);
      return { staged, table: compileRoutingTable(staged.snapshot, staged.nonEndpointChanged ? undefined : this.#table), base: this.#resources.version };
    } catch (err) {
      const message = err instanceof ConfigPushError ? err.message : `configuration refused: ${(err as Error).message}`;
      throw new ConfigRefusedError(message, { cause: err });
    }
  }

  /** Puts a prepared push in force (it must have been prepared on the configuration still held); live when this returns. */
  commitPush(prepared: PreparedConfig): ConfigPushResult {
    if (prepared.base !== this.#resources.version) throw new ConfigRefusedError('configuration refused: prepared on another version');
    const { staged, table } = prepared;
    let compiled = 0;
    for (const e of table.byId.values()) if (this.#table.byId.get(e.id) !== e) compiled++;
    this.#install(staged, table, true);
    return { version: staged.version, changed: staged.changed, compiled };
  }

  /**
   * The configuration held as one full push (what a new worker is started from). Needs the bodies, which are kept
   * only with keepBodies (an agent with workers); null without them.
   */
  fullPush(): ConfigPush | null {
    return fullPushOf(this.#resources);
  }

  /** Resolves once the configuration in force is on disk (writes are asynchronous and coalesced). */
  async persisted(): Promise<void> {
    await this.#o.store?.flush();
  }

  /** A node sized for fewer endpoints than the configuration holds refuses it whole (and keeps serving the previous one). */
  #checkCapacity(snapshot: ConfigSnapshot): void {
    if (this.#exceedsCapacity(snapshot)) {
      throw new Error(`${snapshot.endpoints.length} endpoints exceed this node's limit of ${this.#o.maxEndpoints} (MAX_ENDPOINTS)`);
    }
  }

  #exceedsCapacity(snapshot: ConfigSnapshot): boolean {
    return this.#o.maxEndpoints > 0 && snapshot.endpoints.length > this.#o.maxEndpoints;
  }

  #install(staged: StagedConfig, table: RoutingTable, persist: boolean): void {
    this.#table = table;
    this.#snapshot = staged.snapshot;
    this.#resources.commit(staged);
    this.#o.installed(staged.snapshot, table);
    const store = this.#o.store;
    if (persist && store !== null) {
      const set = this.#resources;
      void store.saveConfig(() => ({ version: set.version, source: set.source, digest: set.digest.hex(), resources: set.resources.values() }));
    }
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
