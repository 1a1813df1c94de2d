// Freshness (RFC 9111 §4.2): whether a stored object is fresh enough for a
// request (with the request's own Cache-Control), usable stale while it is
// revalidated, or must be fetched again; and whether stale-if-error lets it
// answer instead of an origin failure.
import type { CachedObject } from './cache-store.ts';
import { deltaSeconds, type Directives } from './cache-control.ts';

/** A request without cache directives (compared by identity on the hot path). */
export const EMPTY_CC: Directives = Object.freeze({}) as Directives;

/**
 * fresh: serve it; revalidate-in-background: serve it and refresh
 * (stale-while-revalidate); stale: fetch (conditionally) before answering.
 */
export type Freshness = 'fresh' | 'revalidate-in-background' | 'stale';

export function ageMs(entry: CachedObject, now: number): number {
  return entry.correctedInitialAgeMs + (now - entry.responseTimeMs);
}

export function freshness(entry: CachedObject, reqCC: Directives, now: number): Freshness {
  const age = ageMs(entry, now);
  let fresh = !entry.noCache && age < entry.lifetimeMs;
  if (fresh && reqCC !== EMPTY_CC) {
    if (reqCC['no-cache'] !== undefined) fresh = false;
    const maxAge = deltaSeconds(reqCC['max-age']);
    if (maxAge !== null && age > maxAge * 1000) fresh = false;
    const minFresh = deltaSeconds(reqCC['min-fresh']);
    if (minFresh !== null && entry.lifetimeMs - age < minFresh * 1000) fresh = false;
  }
  if (fresh) return 'fresh';
  const staleMs = age - entry.lifetimeMs;
  if (!entry.mustRevalidate && !entry.noCache && reqCC['no-cache'] === undefined && staleMs < entry.staleWhileRevalidateMs) return 'revalidate-in-background';
  return 'stale';
}

/** stale-if-error: the stale object may answer instead of an origin failure. */
export function staleIfErrorAllowed(stale: CachedObject, now: number): boolean {
  if (stale.mustRevalidate) return false;
  return ageMs(stale, now) - stale.lifetimeMs < stale.staleIfErrorMs;
}
