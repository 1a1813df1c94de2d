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
