// The small key-value interface behind rate limits, idempotency records,
// token revocation and pub/sub fan-out. Redis in production (REDIS_URL), an
// in-process implementation otherwise; both pass the same tests.
export interface SetOptions {
  ttlMs?: number;
  /** Only set when the key does not exist (SET NX); the result says whether it was set. */
  onlyIfAbsent?: boolean;
}

export interface WindowCount {
  count: number;
  /** Milliseconds until the window (and so the count) resets. */
  resetMs: number;
}

export interface KeyValueStore {
  readonly kind: 'redis' | 'memory';
  get(key: string): Promise<string | null>;
  /** Several keys in one round trip (MGET). */
  getMany(keys: string[]): Promise<(string | null)[]>;
  set(key: string, value: string, options?: SetOptions): Promise<boolean>;
  del(...keys: string[]): Promise<number>;
  exists(key: string): Promise<boolean>;
  /** Increments a counter that lives for windowMs from its first increment (fixed window). */
  incrWindow(key: string, windowMs: number): Promise<WindowCount>;
  /**
   * Takes up to `want` units of a fixed-window budget of `limit` in one step (never past the limit): `granted` units,
   * `count` the window's total taken after it (0 granted: spent). The counter is incrWindow's.
   */
  takeWindow(key: string, windowMs: number, limit: number, want: number): Promise<WindowCount & { granted: number }>;
  publish(channel: string, message: string): Promise<void>;
  /**
   * Returns a function that ends the subscription. `local` says the message was published through this
   * store (this process), not received from another process sharing the Redis server.
   */
  subscribe(channel: string, onMessage: (message: string, local: boolean) => void): Promise<() => Promise<void>>;
  /** Every live key with this prefix, its value and remaining lifetime (SCAN; for resynchronising caches). */
  entries(prefix: string): Promise<{ key: string; value: string; ttlMs: number | null }[]>;
  /**
   * Reports whether pub/sub delivery can be relied on: false while the
   * subscriber connection is down (messages published meanwhile are lost),
   * true once it is subscribed again. Called with the current state at once.
   */
  onSubscriptionState(listener: (live: boolean) => void): () => void;
  /** Round-trip time in milliseconds; throws when the store does not answer. */
  ping(): Promise<number>;
  close(): Promise<void>;
}
