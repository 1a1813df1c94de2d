// The worker's hot tier: a byte-bounded LRU (lru-cache) behind the ObjectStore interface.
import { LRUCache } from 'lru-cache';
import { entryBytes, type ObjectStore, type StoredEntry } from './store.ts';

interface Held extends StoredEntry {
  readonly size: number;
}

export class MemoryStore implements ObjectStore {
  readonly tier = 'memory' as const;
  readonly maxBytes: number;
  readonly #lru: LRUCache<string, Held>;

  constructor(maxBytes: number) {
    this.maxBytes = Math.max(1, Math.floor(maxBytes));
    this.#lru = new LRUCache<string, Held>({ maxSize: this.maxBytes, maxEntrySize: this.maxBytes, sizeCalculation: (h) => h.size });
  }

  bytes(): number {
    return this.#lru.calculatedSize;
  }

  count(): number {
    return this.#lru.size;
  }

  get(key: string): StoredEntry | undefined {
    return this.#lru.get(key);
  }

  async put(key: string, meta: string, body: Buffer): Promise<boolean> {
    const size = entryBytes(key, meta, body);
    if (size > this.maxBytes) {
      this.#lru.delete(key);
      return false;
    }
    this.#lru.set(key, { meta, body, size });
    return true;
  }

  async delete(key: string): Promise<boolean> {
    return this.#lru.delete(key);
  }

  keys(): IterableIterator<string> {
    return this.#lru.keys();
  }

  async clear(): Promise<void> {
    this.#lru.clear();
  }

  async close(): Promise<void> {
    this.#lru.clear();
  }
}
