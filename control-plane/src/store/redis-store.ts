import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import type { KeyValueStore, SetOptions, WindowCount } from './store.ts';

// INCR and PEXPIRE in one step, so a crash between them cannot leave a counter without expiry.
const INCR_WINDOW = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {count, ttl}`;

// Up to ARGV[3] units of a budget of ARGV[2] (never past it), on incrWindow's counter: {granted, count, ttl}.
const TAKE_WINDOW = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local granted = math.max(0, math.min(tonumber(ARGV[3]), tonumber(ARGV[2]) - count))
if granted > 0 then count = redis.call('INCRBY', KEYS[1], granted) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
if ttl < 0 then ttl = tonumber(ARGV[1]) end
return {granted, count, ttl}`;

/**
 * Messages this store publishes travel as `\u0001<origin>\u0001<message>`: its own subscribers
 * are handed the message at once, in publish(), and skip the copy Redis echoes back, so work
 * announced on a replica starts there without a round trip (as with the in-process store).
 * A message without the mark (another publisher) is delivered as it is.
 */
const MARK = '\u0001';

/**
 * A store that subscribes to a channel says so on it (a marked message with this body, never delivered), so the
 * stores publishing on it learn that another process listens. A store that knows it is the only subscriber of a
 * channel it subscribes to (its last PUBLISH reached only itself, and no store said it subscribed since) hands its
 * messages to its own subscribers and sends nothing to Redis: a lone replica pays no round trip, and no echo, per
 * announcement. It publishes anyway at least every ALONE_RECHECK_MS (a subscriber that does not announce itself).
 */
const SUBSCRIBED = '\u0002';
export const ALONE_RECHECK_MS = 5000;

/** How long a command may wait for its reply (the connection's own; a subscriber's subscriptions have no bound). */
export const COMMAND_TIMEOUT_MS = 5000;

/** How long shutdown waits for Redis to answer QUIT or UNSUBSCRIBE before it drops the connection. */
const QUIT_WAIT_MS = 2000;

export interface RedisStoreOptions {
  /** Prefix for every key and channel: lets tests and tenants share one Redis. */
  keyPrefix?: string;
}

export class RedisStore implements KeyValueStore {
  readonly kind = 'redis' as const;
  readonly #client: Redis;
  readonly #url: string;
  readonly #prefix: string;
  #subscriber: Redis | undefined;
  readonly #handlers = new Map<string, Set<(message: string, local: boolean) => void>>();
  readonly #origin = randomBytes(8).toString('hex');

  constructor(url: string, options: RedisStoreOptions = {}) {
    this.#url = url;
    this.#prefix = options.keyPrefix ?? '';
    this.#client = new Redis(url, {
      keyPrefix: this.#prefix,
      // Fail fast instead of queueing commands forever while Redis is down:
      // readiness must report it and requests must get a clear 503.
      maxRetriesPerRequest: 1,
      enableOfflineQueue: true,
      connectTimeout: 2000,
      // A Redis that accepts and stops answering fails the command too, instead of holding its request.
      commandTimeout: COMMAND_TIMEOUT_MS,
      lazyConnect: false,
      // Commands issued in the same tick (e.g. the revocation checks of concurrent
      // requests) go out as one pipeline: fewer round trips and syscalls under load.
      enableAutoPipelining: true,
    });
    this.#client.on('error', () => { /* reported through ping() and failing commands */ });
    this.#client.defineCommand('incrWindow', { numberOfKeys: 1, lua: INCR_WINDOW });
    this.#client.defineCommand('takeWindow', { numberOfKeys: 1, lua: TAKE_WINDOW });
  }

  async get(key: string): Promise<string | null> {
    return this.#client.get(key);
  }

  async getMany(keys: string[]): Promise<(string | null)[]> {
    return keys.length ? this.#client.mget(...keys) : [];
  }

  async set(key: string, value: string, options: SetOptions = {}): Promise<boolean> {
    const args: (string | number)[] = [];
    if (options.ttlMs) args.push('PX', Math.max(1, Math.round(options.ttlMs)));
    if (options.onlyIfAbsent) args.push('NX');
    const result = await (this.#client.set as (...a: unknown[]) => Promise<string | null>)(key, value, ...args);
    return result === 'OK';
  }

  async del(...keys: string[]): Promise<number> {
    return keys.length ? this.#client.del(...keys) : 0;
  }

  async exists(key: string): Promise<boolean> {
    return (await this.#client.exists(key)) === 1;
  }

  async incrWindow(key: string, windowMs: number): Promise<WindowCount> {
    const [count, ttl] = await (this.#client as unknown as { incrWindow(k: string, w: number): Promise<[number, number]> })
      .incrWindow(key, windowMs);
    return { count, resetMs: ttl };
  }

  async takeWindow(key: string, windowMs: number, limit: number, want: number): Promise<WindowCount & { granted: number }> {
    const [granted, count, ttl] = await (this.#client as unknown as { takeWindow(k: string, w: number, l: number, n: number): Promise<[number, number, number]> })
      .takeWindow(key, windowMs, limit, want);
    return { granted, count, resetMs: ttl };
  }

  /** Channels this store subscribes to on which it knows itself alone: when its last PUBLISH there went out (performance.now()). */
  readonly #alone = new Map<string, number>();

  async publish(channel: string, message: string): Promise<void> {
    const full = this.#prefix + channel;
    this.#deliver(full, message, true);
    const since = this.#alone.get(full);
    if (since !== undefined && performance.now() - since < ALONE_RECHECK_MS) return;
    const sentAt = performance.now();
    const receivers = await this.#client.publish(full, `${MARK}${this.#origin}${MARK}${message}`);
    // Only our own subscriber got it: alone there, until a store says it subscribed (or the recheck).
    if (receivers <= 1 && this.#live && this.#handlers.has(full)) this.#alone.set(full, sentAt);
    else this.#alone.delete(full);
  }

  /** Hands a message to this store's subscribers of the channel (a failing handler does not stop the others); `local`: published here. */
  #deliver(channel: string, message: string, local: boolean): void {
    for (const handler of this.#handlers.get(channel) ?? []) {
      try {
        handler(message, local);
      } catch {
        // A subscriber's own failure is its to report.
      }
    }
  }

  #subscriberConnection(): Redis {
    if (!this.#subscriber) {
      // A subscribed connection can run no other command: it gets its own.
      const subscriber = new Redis(this.#url, { maxRetriesPerRequest: null });
      this.#subscriber = subscriber;
      subscriber.on('error', () => {});
      subscriber.on('message', (ch: string, wire: string) => {
        if (!wire.startsWith(MARK)) return this.#deliver(ch, wire, false);
        const end = wire.indexOf(MARK, 1);
        if (end === -1) return this.#deliver(ch, wire, false);
        // Our own message came back: its subscribers here had it in publish().
        if (wire.slice(1, end) === this.#origin) return;
        const body = wire.slice(end + 1);
        // Another store subscribed: publish there again.
        if (body === SUBSCRIBED) return void this.#alone.delete(ch);
        this.#deliver(ch, body, false);
      });
      // Messages published while the connection is down are lost: listeners must know.
      // (Nor are stores that subscribe meanwhile heard of: publish everywhere again.)
      subscriber.on('close', () => {
        this.#alone.clear();
        this.#setLive(false);
      });
      // After a reconnect, live again only once Redis has confirmed the subscriptions
      // (listeners resynchronise then, so nothing published meanwhile is missed).
      subscriber.on('ready', () => {
        const channels = [...this.#handlers.keys()];
        if (!channels.length) return;
        subscriber.subscribe(...channels).then(() => {
          this.#setLive(true);
          for (const channel of channels) this.#announceSubscribed(channel);
        }, () => {});
      });
    }
    return this.#subscriber;
  }

  /** Tells the stores publishing on `channel` (full name) that this one listens there now. */
  #announceSubscribed(channel: string): void {
    this.#client.publish(channel, `${MARK}${this.#origin}${MARK}${SUBSCRIBED}`).catch(() => { /* they publish anyway within ALONE_RECHECK_MS */ });
  }

  #live = false;
  readonly #stateListeners = new Set<(live: boolean) => void>();

  #setLive(live: boolean): void {
    if (this.#live === live) return;
    this.#live = live;
    for (const listener of this.#stateListeners) listener(live);
  }

  onSubscriptionState(listener: (live: boolean) => void): () => void {
    this.#stateListeners.add(listener);
    listener(this.#live);
    return () => { this.#stateListeners.delete(listener); };
  }

  async entries(prefix: string): Promise<{ key: string; value: string; ttlMs: number | null }[]> {
    const out: { key: string; value: string; ttlMs: number | null }[] = [];
    let cursor = '0';
    do {
      // SCAN matches full key names; the client's keyPrefix is not applied to MATCH.
      const [next, keys] = await this.#client.scan(cursor, 'MATCH', `${this.#prefix}${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (!keys.length) continue;
      const local = keys.map((k) => k.slice(this.#prefix.length));
      const pipeline = this.#client.pipeline();
      for (const key of local) pipeline.get(key).pttl(key);
      const results = (await pipeline.exec()) ?? [];
      local.forEach((key, i) => {
        const value = results[i * 2]?.[1] as string | null;
        const ttl = results[i * 2 + 1]?.[1] as number;
        if (value !== null && ttl !== -2) out.push({ key, value, ttlMs: ttl >= 0 ? ttl : null });
      });
    } while (cursor !== '0');
    return out;
  }

  async subscribe(channel: string, onMessage: (message: string, local: boolean) => void): Promise<() => Promise<void>> {
    const full = this.#prefix + channel;
    this.#subscriberConnection();
    let set = this.#handlers.get(full);
    if (!set) {
      set = new Set();
      this.#handlers.set(full, set);
      await this.#subscriber!.subscribe(full);
      this.#announceSubscribed(full);
    }
    this.#setLive(true);
    set.add(onMessage);
    return async () => {
      set.delete(onMessage);
      if (set.size === 0) {
        this.#handlers.delete(full);
        // A connection that is down has no subscription to end (the next 'ready' subscribes only the
        // channels left); a live one gets UNSUBSCRIBE, waited for a moment at most: its retries are unbounded.
        const subscriber = this.#subscriber;
        if (subscriber?.status === 'ready') await settledWithin(subscriber.unsubscribe(full), QUIT_WAIT_MS);
      }
    };
  }

  async ping(): Promise<number> {
    const started = performance.now();
    await this.#client.ping();
    return performance.now() - started;
  }

  async close(): Promise<void> {
    // QUIT lets the commands in flight on a live connection have their replies (waited for a moment
    // at most: a Redis that stopped answering would hold it forever); a dead one is just dropped.
    // The subscriber has no replies to wait for.
    this.#subscriber?.disconnect();
    const client = this.#client;
    if (client.status === 'ready') await settledWithin(client.quit(), QUIT_WAIT_MS);
    client.disconnect();
  }
}

/** Waits for `work` to settle, at most `ms` milliseconds (its outcome, or its absence, is of no interest). */
async function settledWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work.catch(() => {}), new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); })]);
  clearTimeout(timer);
}
