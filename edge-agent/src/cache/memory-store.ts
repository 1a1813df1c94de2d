// The worker's hot tier: a byte-bounded LRU (lru-cache) behind the ObjectStore
// interface, with its purge indexes (endpoint → path or tag → keys).
import { LRUCache } from 'lru-cache';
import { coveredByRecord, PURGE_RECORD_GRACE_MS, softPurgedAt, targets, type EntryIndex, type PurgeRecord, type PurgeTarget } from './purge.ts';
import { entryBytes, type ObjectStore, type StoredEntry } from './store.ts';

interface Held {
  readonly meta: string;
  readonly body: Buffer;
  staleSince?: number;
  readonly size: number;
  readonly index: EntryIndex;
}

type Index = Map<string, Map<string, Set<string>>>;

function add(index: Index, endpointId: string, name: string, key: string): void {
  let byName = index.get(endpointId);
  if (byName === undefined) index.set(endpointId, (byName = new Map()));
  let keys = byName.get(name);
  if (keys === undefined) byName.set(name, (keys = new Set()));
  keys.add(key);
}

function remove(index: Index, endpointId: string, name: string, key: string): void {
  const byName = index.get(endpointId);
  const keys = byName?.get(name);
  if (keys === undefined) return;
  keys.delete(key);
  if (keys.size === 0) byName!.delete(name);
  if (byName!.size === 0) index.delete(endpointId);
}

export class MemoryStore implements ObjectStore {
  readonly tier = 'memory' as const;
  readonly maxBytes: number;
  readonly #lru: LRUCache<string, Held>;
  readonly #paths: Index = new Map();
  readonly #tags: Index = new Map();
  readonly #purges = new Map<string, PurgeRecord[]>();
  #generation = 1;
  #evictions = 0;

  constructor(maxBytes: number) {
    this.maxBytes = Math.max(1, Math.floor(maxBytes));
    this.#lru = new LRUCache<string, Held>({
      maxSize: this.maxBytes,
      maxEntrySize: this.maxBytes,
      sizeCalculation: (h) => h.size,
      dispose: (held, key, reason) => {
        if (reason === 'evict') this.#evictions++;
        this.#unindex(key, held.index);
      },
    });
  }

  evictions(): number {
    return this.#evictions;
  }

  bytes(): number {
    return this.#lru.calculatedSize;
  }

  count(): number {
    return this.#lru.size;
  }

  generation(): number {
    return this.#generation;
  }

  get(key: string): StoredEntry | undefined {
    return this.#lru.get(key);
  }

  async put(key: string, meta: string, body: Buffer, index: EntryIndex): Promise<boolean> {
    const records = this.#purges.get(index.endpointId);
    if (records !== undefined && coveredByRecord(records, index)) return false;
    const size = entryBytes(key, meta, body);
    if (size > this.maxBytes) {
      this.#lru.delete(key);
      return false;
    }
    const stale = records === undefined ? 0 : softPurgedAt(records, index);
    this.#lru.set(key, stale > 0 ? { meta, body, size, index, staleSince: stale } : { meta, body, size, index });
    add(this.#paths, index.endpointId, index.path, key);
    for (const tag of index.tags) add(this.#tags, index.endpointId, tag, key);
    return true;
  }

  async delete(key: string): Promise<boolean> {
    return this.#lru.delete(key);
  }

  async purge(endpointId: string, target: PurgeTarget, soft = false): Promise<number> {
    const now = Date.now();
    const records = (this.#purges.get(endpointId) ?? []).filter((r) => now - r.at <= PURGE_RECORD_GRACE_MS);
    records.push(soft ? { g: ++this.#generation, at: now, target, soft } : { g: ++this.#generation, at: now, target });
    this.#purges.set(endpointId, records);
    const keys: string[] = [];
    if (target.kind === 'path') keys.push(...(this.#paths.get(endpointId)?.get(target.path) ?? []));
    else if (target.kind === 'tag') keys.push(...(this.#tags.get(endpointId)?.get(target.tag) ?? []));
    else {
      for (const [path, held] of this.#paths.get(endpointId) ?? []) if (targets(target, path, [])) keys.push(...held);
    }
    let removed = 0;
    if (soft) {
      for (const key of keys) {
        const held = this.#lru.peek(key);
        if (held === undefined) continue;
        held.staleSince = now;
        removed++;
      }
      return removed;
    }
    for (const key of keys) if (this.#lru.delete(key)) removed++;
    return removed;
  }

  keys(): IterableIterator<string> {
    return this.#lru.keys();
  }

  async clear(): Promise<void> {
    this.#lru.clear();
    this.#purges.clear();
  }

  async close(): Promise<void> {
    await this.clear();
  }

  #unindex(key: string, index: EntryIndex): void {
    remove(this.#paths, index.endpointId, index.path, key);
    for (const tag of index.tags) remove(this.#tags, index.endpointId, tag, key);
  }
}
