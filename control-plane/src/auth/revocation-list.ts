// Revoked access tokens and sessions. Redis holds the truth (keys that live as
// long as the longest access token); every replica mirrors it in memory so the
// per-request check needs no round trip: its own revocations are applied at
// once, other replicas' arrive by pub/sub, and the mirror is rebuilt from Redis
// whenever the subscription (re)starts. While the subscription is down the
// mirror is not trusted and each check asks Redis directly.
import type { KeyValueStore } from '../store/index.ts';

const CHANNEL = 'auth:revocations';
const SWEEP_INTERVAL_MS = 60_000;

export class RevocationList {
  readonly #store: KeyValueStore;
  /** key → expiry (ms since epoch) */
  readonly #mirror = new Map<string, number>();
  #mirrorComplete = false;
  #resyncGeneration = 0;
  #unsubscribe: (() => Promise<void>) | undefined;
  #stopStateListener: (() => void) | undefined;
  readonly #sweeper: NodeJS.Timeout;

  private constructor(store: KeyValueStore) {
    this.#store = store;
    this.#sweeper = setInterval(() => this.#sweep(), SWEEP_INTERVAL_MS).unref();
  }

  /**
   * Subscribes and builds the mirror. Start never blocks on Redis: if it does
   * not answer within a moment, checks go to the store until the mirror is up.
   */
  static async start(store: KeyValueStore, waitMs = 2000): Promise<RevocationList> {
    const list = new RevocationList(store);
    let firstSync: Promise<void> | undefined;
    list.#stopStateListener = store.onSubscriptionState((live) => {
      if (live) {
        const sync = list.#resync();
        firstSync ??= sync;
        sync.catch(() => {});
      } else {
        list.#mirrorComplete = false;
        list.#resyncGeneration++;
      }
    });
    const subscribed = store.subscribe(CHANNEL, (message) => list.#onMessage(message)).then((unsubscribe) => {
      list.#unsubscribe = unsubscribe;
    });
    subscribed.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      subscribed.then(() => firstSync),
      new Promise<void>((resolve) => { timer = setTimeout(resolve, waitMs); }),
    ]).catch(() => {});
    clearTimeout(timer);
    return list;
  }

  /** Whether the mirror is trusted (false: every check asks the store). */
  get mirrored(): boolean {
    return this.#mirrorComplete;
  }

  /** Records revocations (each key lives ttlMs) and tells every replica. */
  async revoke(keys: string[], ttlMs: number): Promise<void> {
    if (!keys.length) return;
    const expiresAt = Date.now() + ttlMs;
    for (const key of keys) this.#mirror.set(key, expiresAt);
    await Promise.all(keys.map((key) => this.#store.set(key, '1', { ttlMs })));
    await this.#store.publish(CHANNEL, JSON.stringify({ keys, expiresAt }));
  }

  /** True when any key is revoked. Synchronous while the mirror is trusted. */
  check(keys: string[]): boolean | Promise<boolean> {
    if (!this.#mirrorComplete) return this.#store.getMany(keys).then((values) => values.some((v) => v !== null));
    const now = Date.now();
    for (const key of keys) {
      const expiresAt = this.#mirror.get(key);
      if (expiresAt === undefined) continue;
      if (expiresAt > now) return true;
      this.#mirror.delete(key);
    }
    return false;
  }

  async close(): Promise<void> {
    clearInterval(this.#sweeper);
    this.#stopStateListener?.();
    await this.#unsubscribe?.();
  }

  #onMessage(message: string): void {
    try {
      const { keys, expiresAt } = JSON.parse(message) as { keys: string[]; expiresAt: number };
      for (const key of keys) this.#mirror.set(key, expiresAt);
    } catch {
      // A malformed message says nothing trustworthy: distrust the mirror until rebuilt.
      this.#mirrorComplete = false;
      void this.#resync().catch(() => {});
    }
  }

  /** Rebuilds the mirror from the store; trusted only if no disconnect happened meanwhile. */
  async #resync(): Promise<void> {
    const generation = ++this.#resyncGeneration;
    let entries: Awaited<ReturnType<KeyValueStore['entries']>>;
    try {
      entries = await this.#store.entries('revoked:');
    } catch (error) {
      // Try again shortly unless a newer resync or a disconnect took over; checks ask the store meanwhile.
      setTimeout(() => { if (generation === this.#resyncGeneration) void this.#resync().catch(() => {}); }, 1000).unref();
      throw error;
    }
    if (generation !== this.#resyncGeneration) return;
    const now = Date.now();
    for (const entry of entries) this.#mirror.set(entry.key, entry.ttlMs === null ? Number.MAX_SAFE_INTEGER : now + entry.ttlMs);
    this.#mirrorComplete = true;
  }

  #sweep(): void {
    const now = Date.now();
    for (const [key, expiresAt] of this.#mirror) if (expiresAt <= now) this.#mirror.delete(key);
  }
}
