// The purge sequence of an agent process and what it does to the cache: purges
// from the control plane are numbered; the agent applies each once, in order,
// persists the highest it applied, and answers nothing from the cache while it
// knows it is behind (after a restart until the Welcome says which purges it
// missed, then until they are applied). Cut off from the control plane, purges
// cannot reach it: CACHE_WHEN_DISCONNECTED says whether the cache revalidates
// everything with the origin meanwhile or serves as it is.
import type { Logger } from 'pino';
import { normalizePath } from '../../../shared/src/match/path.ts';
import type { CacheStore } from './cache-store.ts';
import type { PurgeTarget } from './purge.ts';

export type PurgeType = 'path' | 'wildcard' | 'tag' | 'all';

export interface PurgeCommand {
  sequence: number;
  purge_id: string;
  /** Empty string: every endpoint. */
  endpoint_id: string;
  type: PurgeType;
  paths?: readonly string[];
  tags?: readonly string[];
  /** A soft purge: what it names is marked stale (revalidated before its next use) instead of removed. */
  soft?: boolean;
}

export interface PurgeResult {
  applied: boolean;
  purged: number;
}

/**
 * What the cache does while the agent is cut off from the control plane (CACHE_WHEN_DISCONNECTED): `revalidate`
 * (default) every cached object with the origin before serving it, so no purge made meanwhile can be missed;
 * `serve` it as it is (availability first: purges made meanwhile are applied when the agent is back).
 */
export type CacheWhenDisconnected = 'revalidate' | 'serve';

/** The request path's two switches this state sets (the proxy's). */
export interface CacheGate {
  /** Nothing is answered from the cache (requests go to the origin as misses; what they fetch may be stored). */
  cacheReadsSuspended: boolean;
  /** Every cached object is revalidated with the origin before it is served. */
  revalidateAll: boolean;
}

/** What a new worker takes from its primary (adopt). */
export interface PurgeStateSnapshot {
  purgeSequence: number;
  catchUpTarget: number;
  cutOff: boolean;
}

export interface PurgeStateOptions {
  store: CacheStore;
  gate: CacheGate;
  logger: Logger;
  cacheWhenDisconnected?: CacheWhenDisconnected;
  /** The endpoints of the configuration in force (a purge of every endpoint covers these and those the cache holds). */
  endpoints: () => Iterable<string>;
  /** Persists a newly applied sequence (the agent's data directory); absent: not persisted. */
  persist?: (sequence: number) => void;
}

/** The catch-up target while held at start: not known until the Welcome (holdUntilWelcome). */
const UNKNOWN_TARGET = Number.MAX_SAFE_INTEGER;

export class PurgeState {
  #sequence = 0;
  /** The purge sequence the control plane announced at the last Welcome, while the agent is behind it. */
  #catchUpTarget = 0;
  /** The node tier held objects at start and no Welcome has come yet (holdUntilWelcome). */
  #heldFromBefore = false;
  /** Cut off from the control plane for longer than the control client's bound (controlPlaneLost). */
  #cutOff = false;
  readonly #o: PurgeStateOptions;
  readonly #whenDisconnected: CacheWhenDisconnected;

  constructor(options: PurgeStateOptions) {
    this.#o = options;
    this.#whenDisconnected = options.cacheWhenDisconnected ?? 'revalidate';
  }

  /** The highest purge sequence applied. */
  get sequence(): number {
    return this.#sequence;
  }

  get cutOff(): boolean {
    return this.#cutOff;
  }

  /** Whether cache reads are suspended until missed purges are applied (see beginCatchUp). */
  get catchingUp(): boolean {
    return this.#o.gate.cacheReadsSuspended;
  }

  /** Nothing is cached: no purge made so far can concern this agent (said in Hello as cache_empty). */
  get cacheEmpty(): boolean {
    return this.#o.store.objectCount === 0 && !this.#heldFromBefore;
  }

  /** The sequence persisted by an earlier run (restored with its configuration). */
  restore(sequence: number): void {
    this.#sequence = sequence;
  }

  /**
   * At start, with a control plane: the node tier holds objects from before this start (`objects`), and purges
   * may have been made while the agent was down. Nothing is answered from the cache until the control plane's
   * Welcome says which purges were missed and they are applied (beginCatchUp); the Hello does not say the cache
   * is empty. Cut off from the control plane meanwhile, CACHE_WHEN_DISCONNECTED decides (controlPlaneLost).
   */
  holdUntilWelcome(objects: number): void {
    if (objects === 0) return;
    this.#heldFromBefore = true;
    this.#catchUpTarget = UNKNOWN_TARGET;
    this.#o.gate.cacheReadsSuspended = true;
    this.#o.logger.info({ objects, purge_sequence: this.#sequence }, 'the node cache holds objects from before this start: not serving them until the control plane says which purges were missed');
  }

  /**
   * Called on Welcome when the Hello said the cache was empty, or when the control plane says the agent missed
   * too many purges to replay (`reset`): every purge up to `sequence` is moot. The whole cache is dropped (for
   * an empty cache, what was cached between the Hello and now, fetched before purges the control plane counted
   * in `sequence`), then `sequence` is taken as applied; the open purges that follow are acknowledged as replays.
   */
  startFrom(sequence: number, reset = false): void {
    if (sequence <= this.#sequence) return;
    this.#o.store.dropEverything();
    this.#o.logger.info({ purge_sequence: sequence, previous: this.#sequence },
      reset ? 'missed too many purges to replay: cache dropped, starting from the platform\'s latest purge' : 'cache empty at connect: starting from the platform\'s latest purge');
    this.#note(sequence);
  }

  /**
   * Called on Welcome: when the control plane's purge sequence is ahead of the one applied, purges were missed
   * while away and they follow in order. Until the agent has applied them, nothing is answered from the cache
   * (requests go to the origin as misses; what they fetch may be stored, it is newer than any purge). Returns
   * whether the agent is catching up.
   */
  beginCatchUp(target: number): boolean {
    const gate = this.#o.gate;
    this.#heldFromBefore = false;
    if (target <= this.#sequence) {
      this.#catchUpTarget = 0;
      if (gate.cacheReadsSuspended) this.#o.logger.info({ purge_sequence: this.#sequence }, 'purges caught up; serving from the cache again');
      gate.cacheReadsSuspended = false;
      return false;
    }
    this.#catchUpTarget = target;
    gate.cacheReadsSuspended = true;
    this.#o.logger.info({ purge_sequence: this.#sequence, target }, 'missed purges: not serving from the cache until they are applied');
    return true;
  }

  /**
   * The control client's word that the agent has been cut off from the control plane for longer than its bound
   * (`lost`), or is connected again. Purges made meanwhile cannot reach it: with CACHE_WHEN_DISCONNECTED=revalidate
   * every cached object is revalidated with the origin before it is served until it is back (then the missed
   * purges are applied before its cache answers alone again: beginCatchUp); with `serve` the cache serves as it is.
   */
  controlPlaneLost(lost: boolean): void {
    if (lost === this.#cutOff) return;
    this.#cutOff = lost;
    const { gate, logger } = this.#o;
    if (lost && this.#catchUpTarget === UNKNOWN_TARGET) {
      // Held since start for a Welcome that does not come: what the cache does now is CACHE_WHEN_DISCONNECTED's.
      this.#catchUpTarget = 0;
      gate.cacheReadsSuspended = false;
    }
    const revalidate = this.#whenDisconnected === 'revalidate';
    gate.revalidateAll = lost && revalidate;
    if (!lost) logger.info('the control plane is back: the cache serves again once missed purges are applied');
    else if (revalidate) logger.warn('cut off from the control plane: every cached object is revalidated with the origin before it is served, until it is back');
    else logger.warn('cut off from the control plane: the cache keeps serving; purges made meanwhile are applied when it is back (CACHE_WHEN_DISCONNECTED=serve)');
  }

  /** Records a purge the agent cannot apply (unknown type) as seen, so it does not hold the catch-up forever. */
  skip(sequence: number, reason: string): void {
    this.#o.logger.warn({ sequence, reason }, 'purge not applied');
    this.#note(sequence);
  }

  /**
   * Applies one purge. Purges at or below the applied sequence are acknowledged without effect (replays after
   * reconnect). With a node tier, a promise: the purge is applied there too before it may be acknowledged.
   */
  apply(cmd: PurgeCommand): PurgeResult | Promise<PurgeResult> {
    const store = this.#o.store;
    if (!store.hasNodeTier) return this.#applyHere(cmd);
    const failures = store.nodePurgeFailures;
    const result = this.#applyHere(cmd);
    return store.settled().then(() => {
      if (store.nodePurgeFailures > failures) throw new Error('the node cache tier could not apply the purge');
      return result;
    });
  }

  /**
   * A worker takes its primary's purge state on start: the purge sequence applied, the catch-up in progress
   * (nothing served from the cache until it is reached) and whether the agent is cut off.
   */
  adopt(state: PurgeStateSnapshot): void {
    this.#sequence = state.purgeSequence;
    if (state.catchUpTarget > state.purgeSequence) this.beginCatchUp(state.catchUpTarget);
    this.controlPlaneLost(state.cutOff);
  }

  /** The state a new worker adopts (adopt). */
  get snapshot(): PurgeStateSnapshot {
    return { purgeSequence: this.#sequence, catchUpTarget: this.#o.gate.cacheReadsSuspended ? this.#catchUpTarget : 0, cutOff: this.#cutOff };
  }

  #applyHere(cmd: PurgeCommand): PurgeResult {
    if (cmd.sequence > 0 && cmd.sequence <= this.#sequence) return { applied: false, purged: 0 };
    const store = this.#o.store;
    const endpoints = cmd.endpoint_id ? [cmd.endpoint_id] : [...new Set([...this.#o.endpoints(), ...store.endpointIds()])];
    let purged = 0;
    for (const endpointId of endpoints) {
      if (cmd.soft === true) {
        for (const target of purgeTargets(cmd)) purged += store.softPurge(endpointId, target);
        continue;
      }
      switch (cmd.type) {
        case 'path':
          for (const p of cmd.paths ?? []) purged += store.purgePath(endpointId, pathOf(p));
          break;
        case 'tag':
          for (const t of cmd.tags ?? []) purged += store.purgeTag(endpointId, t);
          break;
        case 'wildcard':
          for (const p of cmd.paths ?? []) store.purgeWildcard(endpointId, pathOf(p));
          break;
        case 'all':
          store.purgeAll(endpointId);
          break;
        default:
          throw new Error(`unknown purge type ${String((cmd as { type: unknown }).type)}`);
      }
    }
    this.#o.logger.info({ purge_id: cmd.purge_id, sequence: cmd.sequence, type: cmd.type, soft: cmd.soft === true, endpoint: cmd.endpoint_id || '*', purged }, 'purge applied');
    this.#note(cmd.sequence);
    return { applied: true, purged };
  }

  #note(sequence: number): void {
    if (sequence > this.#sequence) {
      this.#sequence = sequence;
      this.#o.persist?.(sequence);
    }
    if (this.#o.gate.cacheReadsSuspended && this.#sequence >= this.#catchUpTarget) this.beginCatchUp(this.#catchUpTarget);
  }
}

/** What a purge command names, as the cache's purge targets. */
export function purgeTargets(cmd: PurgeCommand): PurgeTarget[] {
  switch (cmd.type) {
    case 'path': return (cmd.paths ?? []).map((p) => ({ kind: 'path', path: pathOf(p) }));
    case 'wildcard': return (cmd.paths ?? []).map((p) => ({ kind: 'glob', pattern: pathOf(p) }));
    case 'tag': return (cmd.tags ?? []).map((tag) => ({ kind: 'tag', tag }));
    case 'all': return [{ kind: 'all' }];
  }
}

/**
 * Purge paths may be given as full URLs; only the path counts (query variants are purged with it), normalised as
 * request paths are, so it names the stored objects whatever spelling the purge used ("/%7Euser/a" is "/~user/a").
 */
export function pathOf(p: string): string {
  let path = p;
  if (/^https?:\/\//i.test(p)) {
    const u = URL.parse(p);
    if (u) path = u.pathname;
  } else {
    const q = p.indexOf('?');
    if (q !== -1) path = p.slice(0, q);
  }
  return normalizePath(path) ?? path;
}
