// Fixed-window rate limits in the shared store (Redis in production), so every
// control-plane replica counts against the same budget.
import type { KeyValueStore } from '../store/index.ts';
import { ApiError } from './errors.ts';

export interface RateLimitResult {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the window resets. */
  resetSeconds: number;
}

export async function consumeRateLimit(store: KeyValueStore, key: string, limit: number, windowSeconds: number): Promise<RateLimitResult> {
  const { count, resetMs } = await store.incrWindow(`rl:${key}`, windowSeconds * 1000);
  return {
    allowed: count <= limit,
    limit,
    remaining: Math.max(0, limit - count),
    resetSeconds: Math.max(1, Math.ceil(resetMs / 1000)),
  };
}

export function rateLimitHeaders(result: RateLimitResult): Record<string, string> {
  return {
    'ratelimit-limit': String(result.limit),
    'ratelimit-remaining': String(result.remaining),
    'ratelimit-reset': String(result.resetSeconds),
  };
}

export function rateLimited(result: RateLimitResult): ApiError {
  return new ApiError('RATE_LIMITED', undefined, {
    headers: { 'retry-after': String(result.resetSeconds), ...rateLimitHeaders(result) },
  });
}

/**
 * For a budget that only failures spend (wrong PINs): 429 RATE_LIMITED when
 * it is already spent, without spending it; a failure is then recorded with
 * consumeRateLimit. Check and spend must be serialised per subject (e.g.
 * under a row lock), or parallel attempts could all pass the check.
 */
export async function assertBudgetLeft(store: KeyValueStore, key: string, limit: number, windowSeconds: number): Promise<void> {
  const spent = Number((await store.get(`rl:${key}`)) ?? 0);
  // Spent: count once more to learn the window's reset for Retry-After (and throw). Should the
  // window have ended in between, that count opens the next one and the attempt goes ahead.
  if (spent >= limit) await enforceRateLimit(store, key, limit, windowSeconds);
}

/** Consumes one unit and throws 429 RATE_LIMITED with Retry-After when the budget is spent. */
export async function enforceRateLimit(store: KeyValueStore, key: string, limit: number, windowSeconds: number): Promise<RateLimitResult> {
  const result = await consumeRateLimit(store, key, limit, windowSeconds);
  if (!result.allowed) throw rateLimited(result);
  return result;
}

/** The share of a leased limit one lease takes (RateLimitRule.leased): a tenth, so ten replicas hold at most the whole budget. */
const LEASE_SHARE = 10;

interface Lease {
  /** Units this replica may still spend. */
  left: number;
  /** The window's total taken (by every replica) when the lease was taken. */
  count: number;
  /** When the window ends (Date.now() ms). */
  resetAt: number;
}

/**
 * Leased budgets (RateLimitRule.leased): a replica takes a block of units of a fixed-window budget from the shared
 * store in one step (never past the limit: takeWindow) and spends them locally, so a hot route costs one store round
 * trip per block, not per request. The limit holds across replicas; a replica's unspent units lapse with the window.
 */
export class RateLimitLeases {
  readonly #store: KeyValueStore;
  readonly #leases = new Map<string, Lease>();
  /** Leases being taken, by key: concurrent requests of one caller wait for the same round trip. */
  readonly #taking = new Map<string, Promise<Lease & { granted: number }>>();

  constructor(store: KeyValueStore) {
    this.#store = store;
  }

  /** Consumes one unit; 429 RATE_LIMITED with Retry-After when the budget is spent. */
  async enforce(key: string, limit: number, windowSeconds: number): Promise<RateLimitResult> {
    for (;;) {
      const now = Date.now();
      const lease = this.#leases.get(key);
      if (lease && lease.resetAt > now && lease.left > 0) {
        lease.left--;
        return { allowed: true, limit, remaining: Math.max(0, limit - lease.count + lease.left), resetSeconds: Math.max(1, Math.ceil((lease.resetAt - now) / 1000)) };
      }
      let taking = this.#taking.get(key);
      if (!taking) {
        taking = this.#take(key, limit, windowSeconds);
        this.#taking.set(key, taking);
        taking.then(() => this.#taking.delete(key), () => this.#taking.delete(key));
      }
      const taken = await taking;
      // Nothing granted: spent (a block others here spent first is taken again).
      if (taken.granted === 0) {
        const result = { allowed: false, limit, remaining: 0, resetSeconds: Math.max(1, Math.ceil((taken.resetAt - Date.now()) / 1000)) };
        throw rateLimited(result);
      }
    }
  }

  async #take(key: string, limit: number, windowSeconds: number): Promise<Lease & { granted: number }> {
    const { granted, count, resetMs } = await this.#store.takeWindow(`rl:${key}`, windowSeconds * 1000, limit, Math.max(1, Math.ceil(limit / LEASE_SHARE)));
    const lease = { left: granted, count, resetAt: Date.now() + resetMs };
    this.#leases.set(key, lease);
    this.#sweep();
    return { ...lease, granted };
  }

  /** Drops the leases of ended windows now and then (one per caller at most otherwise). */
  #sweep(): void {
    if (this.#leases.size < 10_000) return;
    const now = Date.now();
    for (const [key, lease] of this.#leases) if (lease.resetAt <= now) this.#leases.delete(key);
  }
}

const leasesByStore = new WeakMap<KeyValueStore, RateLimitLeases>();

/** The leased budgets kept over `store` (one set per store: routes sharing a rule share its leases). */
export function rateLimitLeases(store: KeyValueStore): RateLimitLeases {
  let leases = leasesByStore.get(store);
  if (!leases) leasesByStore.set(store, (leases = new RateLimitLeases(store)));
  return leases;
}
