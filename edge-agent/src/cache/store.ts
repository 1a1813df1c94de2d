// One interface for every tier that holds cached objects (as undici's cache
// has one store interface and one conformance suite per store): the worker's
// in-memory hot tier (memory-store.ts) and the node-wide tier shared by every
// worker and kept across restarts (lmdb-store.ts). A tier stores opaque
// entries: the object's metadata as a string (what the proxy serialises) and
// its body as bytes; it knows nothing of HTTP. Purges are the tier's own work
// (purge.ts): it indexes each entry by endpoint, path and tags.
import type { EntryIndex, PurgeTarget } from './purge.ts';

export interface StoredEntry {
  /** The metadata the proxy stored with the body (JSON of the object's head and freshness). */
  readonly meta: string;
  readonly body: Buffer;
  /** Set when a soft purge named the entry: it is stale from then (ms since the epoch). */
  readonly staleSince?: number;
}

export interface ObjectStore {
  /** 'memory': one worker's hot tier; 'node': shared by every worker of the node. */
  readonly tier: 'memory' | 'node';
  /** The size bound: bytes() never exceeds it once a put has returned. */
  readonly maxBytes: number;
  /** Bytes held (entryBytes of every entry). */
  bytes(): number;
  /** Entries this process removed to keep the size bound, since it opened the store. */
  evictions(): number;
  count(): number;
  /** Synchronous: a hit must not wait for the event loop. */
  get(key: string): StoredEntry | undefined;
  /** The generation a fill takes when it begins (EntryIndex.generation). */
  generation(): number;
  /**
   * Stores or replaces; false when the entry alone exceeds the bound (nothing
   * stored, an older entry under the key removed) or when a purge made after
   * the fill began covers it (nothing stored).
   */
  put(key: string, meta: string, body: Buffer, index: EntryIndex): Promise<boolean>;
  /**
   * Removes every entry of the endpoint the target names and records the purge; how many were removed. soft:
   * marks them stale instead (staleSince, also on entries stored later from fills begun before it); how many.
   */
  purge(endpointId: string, target: PurgeTarget, soft?: boolean): Promise<number>;
  /** True when the key was held. */
  delete(key: string): Promise<boolean>;
  keys(): IterableIterator<string>;
  clear(): Promise<void>;
  close(): Promise<void>;
}

/** Per-entry bookkeeping counted against a tier's bound, beside the key, metadata and body. */
export const ENTRY_OVERHEAD = 256;

/** What one entry costs against a tier's bound. */
export function entryBytes(key: string, meta: string, body: Buffer): number {
  return Buffer.byteLength(key) + Buffer.byteLength(meta) + body.length + ENTRY_OVERHEAD;
}
