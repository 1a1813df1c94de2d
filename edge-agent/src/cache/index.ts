// The cache tiers' door: the store interface, the worker's memory tier and the
// node-wide LMDB tier, and how an agent process opens the node tier.
import { join } from 'node:path';
import { LmdbStore } from './lmdb-store.ts';

export type { ObjectStore, StoredEntry } from './store.ts';
export { entryBytes } from './store.ts';
export type { EntryIndex, PurgeTarget } from './purge.ts';
export { targets } from './purge.ts';
export { MemoryStore } from './memory-store.ts';
export { LmdbStore } from './lmdb-store.ts';

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
