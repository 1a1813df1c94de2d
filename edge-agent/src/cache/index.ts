// The cache's door: everything outside edge-agent/src/cache/ imports the cache
// from here. What is behind it:
// - the store interface and its two implementations (store.ts, memory-store.ts,
//   lmdb-store.ts: the worker's memory tier and the node-wide LMDB tier), with
//   one conformance suite run against each (store-conformance.ts);
// - the tiered object cache with its purge indexes (cache-store.ts) and how a
//   purge names objects (purge.ts);
// - the HTTP caching rules: Cache-Control and validators (cache-control.ts,
//   structured-fields.ts, http-date.ts) and freshness (freshness.ts);
// - fills: one per key in a process (single-flight.ts) and per node across
//   workers (node-fills.ts), and the slice arithmetic of large objects (slices.ts);
// - the purge sequence and what it does to the cache (purge-state.ts), and
//   prefetch (prefetch.ts).
// The request path that uses it (storability, fills, serving slices) is the
// proxy's: proxy/ imports the cache, never the other way.
import { join } from 'node:path';
import { LmdbStore } from './lmdb-store.ts';

export type { ObjectStore, StoredEntry } from './store.ts';
export { entryBytes } from './store.ts';
export type { EntryIndex, PurgeTarget } from './purge.ts';
export { targets } from './purge.ts';
export { MemoryStore } from './memory-store.ts';
export { LmdbStore } from './lmdb-store.ts';
export { CacheStore, type CachedObject } from './cache-store.ts';
export {
  correctedInitialAgeMs, deltaSeconds, freshnessLifetime, HEURISTIC_STATUSES, ifNoneMatchMatches, parseAge, parseCacheControl, parseHttpDate,
  parseTargetedCacheControl, UNDERSTOOD_STATUSES, type Directives,
} from './cache-control.ts';
export { EMPTY_CC, freshness, staleIfErrorAllowed, type Freshness } from './freshness.ts';
export { httpDateMs, retryAfterMs } from './http-date.ts';
export { systemClock, type Clock } from './clock.ts';
export { SingleFlight } from './single-flight.ts';
export { fillOnce, type FillTurn, type FillTurns, type NodeFillLock } from './node-fills.ts';
export { parseContentRange, rangeStart, sliceBounds, sliceCount, sliceKey, SliceSource } from './slices.ts';
export { PurgeState, type CacheGate, type CacheWhenDisconnected, type PurgeCommand, type PurgeResult, type PurgeStateSnapshot, type PurgeType } from './purge-state.ts';
export { Prefetcher, type PrefetchResult } from './prefetch.ts';

/** Where the node tier lives in an agent's data directory. */
export const nodeTierDir = (dataDir: string): string => join(dataDir, 'cache');

/**
 * Opens the node tier as the process that owns the node does at start (the
 * single process, or the primary before its workers): the store is checked
 * in a child (a damaged one starts empty, with one line). What it holds is
 * kept; the agent holds it back until it knows which purges it missed
 * (EdgeAgent.holdCacheUntilWelcome).
 */
export function openNodeTierAtStart(dataDir: string, maxBytes: number, warn: (line: string) => void): Promise<LmdbStore> {
  return LmdbStore.openChecked({ dir: nodeTierDir(dataDir), maxBytes }, warn);
}

/** Opens the node tier a primary prepared (a worker's): as it is. */
export function openNodeTier(dataDir: string, maxBytes: number): Promise<LmdbStore> {
  return LmdbStore.open({ dir: nodeTierDir(dataDir), maxBytes });
}
