// Lookup and freshness (RFC 9111 §4): the cache key of a request, the stored
// object it may use, and whether that object is fresh enough for this request
// (with the request's own Cache-Control), usable stale while revalidating, or
// must be fetched again.
import type { CachedObject, CacheStore } from './cache-store.ts';
import { deltaSeconds, parseCacheControl, type Directives } from './cache-control.ts';
import type { RoutedExchange } from './exchange.ts';
import { primaryCacheKey, varyValues } from './http-util.ts';
import type { OriginError } from './origin-client.ts';

export const EMPTY_CC: Directives = Object.freeze({}) as Directives;

/** The request's cache directives (Cache-Control, or Pragma: no-cache without it); EMPTY_CC when it has none. */
export function requestDirectives(ex: RoutedExchange): Directives {
  const vh = ex.vh;
  if (vh.cacheControl !== undefined) return parseCacheControl(vh.cacheControl);
  return vh.pragma !== undefined && /no-cache/i.test(vh.pragma) ? { 'no-cache': true } as Directives : EMPTY_CC;
}

export interface CacheKeys {
  /** endpoint, route, keyed authority, path, query and rule parts. */
  primary: string;
  /** primary plus the request's values of the Vary fields last seen for it. */
  key: string;
}

/** The request's cache keys: one extra Map read when responses under its primary key vary. */
export function cacheKeys(ex: RoutedExchange, store: CacheStore): CacheKeys {
  const primary = primaryCacheKey(ex.endpoint, ex.route, ex.authority, ex.path, ex.query, ex.rule, ex);
  const varyNames = store.varyFor(primary);
  return { primary, key: varyNames === undefined ? primary : primary + '\x01' + varyValues(ex.headers, varyNames) };
}

/** RFC 9111 §3.5: a request with Authorization is answered only by an object whose response allowed sharing. */
export function usableObject(ex: RoutedExchange, found: CachedObject | undefined): CachedObject | undefined {
  return found !== undefined && ex.vh.authorization !== undefined && !found.authorizationAllowed ? undefined : found;
}

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

/**
 * RFC 9111 §4.2.4: cut off from the origin (it refused, closed or reset the
 * connection, before or during its answer), the cache may answer with a stale
 * object, whatever stale-if-error says, unless the response forbade serving it
 * stale (must-revalidate, proxy-revalidate, s-maxage, no-cache).
 */
export function staleOnDisconnectAllowed(stale: CachedObject, error: OriginError | null): boolean {
  return error !== null && error.kind === 'connect_failure' && !stale.mustRevalidate && !stale.noCache;
}

/** Whether a shared object fetched for another request of the same key matches this request's Vary values. */
export function varyMatches(ex: RoutedExchange, entry: CachedObject): boolean {
  return entry.varyValues === (entry.varyNames ? varyValues(ex.headers, entry.varyNames) : '');
}
