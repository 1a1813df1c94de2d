// Lookup (RFC 9111 §4): the cache key of a request, the stored object it may
// use, and whether it may answer stale when the origin is out of reach. Whether
// an object is fresh enough for a request is the cache's (cache/freshness.ts).
import { EMPTY_CC, parseCacheControl, type CachedObject, type CacheStore, type Directives } from '../cache/index.ts';
import type { RoutedExchange } from './exchange.ts';
import { primaryCacheKey, varyValues } from './http-util.ts';
import type { OriginError } from './origin-client.ts';

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
