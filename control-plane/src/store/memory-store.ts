import { EventEmitter } from 'node:events';
import type { KeyValueStore, SetOptions, WindowCount } from './store.ts';

interface Entry { value: string; expiresAt: number }

/** In-process store for single-process development (no REDIS_URL). */
export class MemoryStore implements KeyValueStore {
  readonly kind = 'memory' as const;
  readonly #entries = new Map<string, Entry>();
  readonly #bus = new EventEmitter();
  readonly #sweeper: NodeJS.Timeout;

  constructor() {
    this.#bus.setMaxListeners(0);
    // Expired keys are dropped on read; the sweep only bounds memory.
    this.#sweeper = setInterval(() => this.#sweep(), 60_000).unref();
  }

  #live(key: string): Entry | undefined {
    const entry = this.#entries.get(key);
    if (entry && entry.expiresAt <= Date.now()) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry;
  }

  #sweep(): void {
    const now = Date.now();
    for (const [key, entry] of this.#entries) if (entry.expiresAt <= now) this.#entries.delete(key);
  }

  async get(key: string): Promise<string | null> {
    return this.#live(key)?.value ?? null;
  }

  async getMany(keys: string[]): Promise<(string | null)[]> {
    return keys.map((key) => this.#live(key)?.value ?? null);
  }

  async set(key: string, value: string, options: SetOptions = {}): Promise<boolean> {
    if (options.onlyIfAbsent && this.#live(key)) return false;
    this.#entries.set(key, { value, expiresAt: options.ttlMs ? Date.now() + options.ttlMs : Infinity });
    return true;
  }

  async del(...keys: string[]): Promise<number> {
    let removed = 0;
    for (const key of keys) if (this.#live(key) && this.#entries.delete(key)) removed++;
    return removed;
  }

  async exists(key: string): Promise<boolean> {
    return this.#live(key) !== undefined;
  }

  async incrWindow(key: string, windowMs: number): Promise<WindowCount> {
    const now = Date.now();
    const entry = this.#live(key);
    if (!entry) {
      this.#entries.set(key, { value: '1', expiresAt: now + windowMs });
      return { count: 1, resetMs: windowMs };
    }
    entry.value = String(Number(entry.value) + 1);
    return { count: Number(entry.value), resetMs: Math.max(0, entry.expiresAt - now) };
  }

  async takeWindow(key: string, windowMs: number, limit: number, want: number): Promise<WindowCount & { granted: number }> {
    const now = Date.now();
    let entry = this.#live(key);
    if (!entry) this.#entries.set(key, (entry = { value: '0', expiresAt: now + windowMs }));
    const count = Number(entry.value);
    const granted = Math.max(0, Math.min(want, limit - count));
    entry.value = String(count + granted);
    return { granted, count: count + granted, resetMs: Math.max(0, entry.expiresAt - now) };
  }

  async publish(channel: string, message: string): Promise<void> {
    // Each subscriber on its own: one that throws does not keep the message from the others.
    for (const listener of this.#bus.listeners(channel) as ((message: string, local: boolean) => void)[]) {
      try {
        listener(message, true);
      } catch {
        // A subscriber's own failure is its to report.
      }
    }
  }

  async subscribe(channel: string, onMessage: (message: string, local: boolean) => void): Promise<() => Promise<void>> {
    this.#bus.on(channel, onMessage);
    return async () => { this.#bus.off(channel, onMessage); };
  }

  async entries(prefix: string): Promise<{ key: string; value: string; ttlMs: number | null }[]> {
    const now = Date.now();
    const out: { key: string; value: string; ttlMs: number | null }[] = [];
    for (const [key, entry] of this.#entries) {
      if (!key.startsWith(prefix) || entry.expiresAt <= now) continue;
      out.push({ key, value: entry.value, ttlMs: entry.expiresAt === Infinity ? null : entry.expiresAt - now });
    }
    return out;
  }

  /** In one process, delivery never fails. */
  onSubscriptionState(listener: (live: boolean) => void): () => void {
    listener(true);
    return () => {};
  }

  async ping(): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    this.#entries.clear();
    this.#bus.removeAllListeners();
  }
}
