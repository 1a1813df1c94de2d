// Serving from cache: a stored object answers the viewer as 304 (the viewer's
// own conditional matched), 206 or 416 (a single byte range of a stored 200),
// or the full stored response. A hit's header list is built once per object
// and whole-second Age and reused; only Age (and the Cache-Status ttl) changes.
// Where the route compresses, the object answered is the identity object's
// encoded variant the viewer accepts (variants.ts), made the first time.
import type { CacheStatus } from '../metrics/traffic.ts';
import { httpDateMs, ifNoneMatchMatches, type CachedObject } from '../cache/index.ts';
import type { RoutedExchange } from './exchange.ts';
import type { Exit } from './exit.ts';
import { parseRange, type ViewerHeaders } from './http-util.ts';

/** Fields a 304 from cache carries (RFC 9110 §15.4.5). */
const NOT_MODIFIED_FIELDS = new Set(['cache-control', 'content-location', 'date', 'etag', 'expires', 'vary', 'last-modified']);

export function serveFromCache(exit: Exit, ex: RoutedExchange, entry: CachedObject, status: CacheStatus, now: number): void {
  const compression = ex.route.shaping.compression;
  if (compression !== null && entry.status === 200) {
    const chosen = exit.shaper.variants.choose(entry, compression, ex.vh.acceptEncoding, ex.vh.range !== undefined);
    if (chosen instanceof Promise) {
      chosen.then((variant) => serveObject(exit, ex, variant, status, now)).catch(() => ex.res.destroy());
      return;
    }
    entry = chosen;
  }
  serveObject(exit, ex, entry, status, now);
}

/** The object's age in whole seconds now (its Age field). */
export function ageSeconds(entry: CachedObject, now: number): number {
  return Math.max(0, Math.floor((entry.correctedInitialAgeMs + now - entry.responseTimeMs) / 1000));
}

/** Answers the viewer's own conditional request from the stored validators (304); false when it does not match. */
export function answerNotModified(exit: Exit, ex: RoutedExchange, entry: CachedObject, status: CacheStatus, ageSec: number): boolean {
  const vh = ex.vh;
  const inm = vh.ifNoneMatch;
  const ims = vh.ifModifiedSince;
  if ((inm === undefined && ims === undefined) || (entry.status !== 200 && entry.status !== 203) || !notModified(inm, ims, entry)) return false;
  const out: string[] = [];
  for (const [k, v] of entry.headers) if (NOT_MODIFIED_FIELDS.has(k)) out.push(k, k === 'cache-control' && entry.browserCacheControl !== null ? entry.browserCacheControl : v);
  addCacheHeaders(exit, out, entry, ageSec, status);
  exit.send(ex, 304, out, null, status, true, entry);
  return true;
}

function serveObject(exit: Exit, ex: RoutedExchange, entry: CachedObject, status: CacheStatus, now: number): void {
  const vh = ex.vh;
  const ageSec = ageSeconds(entry, now);
  // Statuses that did not go to the origin count as served from cache.
  const fromCache = status !== 'MISS' && status !== 'EXPIRED';
  if ((vh.ifNoneMatch !== undefined || vh.ifModifiedSince !== undefined) && answerNotModified(exit, ex, entry, status, ageSec)) return;
  const body = entry.body!;
  const range = vh.range;
  if (range !== undefined && entry.status === 200 && ifRangeAllows(vh, entry)) {
    const r = parseRange(range, body.length);
    if (r !== undefined) {
      const out = buildHeaders(exit, entry, ageSec, status, true);
      if (r === null) {
        out.push('content-range', `bytes */${body.length}`, 'content-length', '0');
        exit.send(ex, 416, out, null, status, true, entry);
        return;
      }
      const [start, end] = r;
      out.push('content-range', `bytes ${start}-${end}/${body.length}`, 'content-length', String(end - start + 1));
      exit.send(ex, 206, out, body.subarray(start, end + 1), status, true, entry);
      return;
    }
  }
  let headers: string[];
  if (status === 'HIT' && entry.fromNodeTier === true) {
    // Read from the node tier by this request: said so once (the next hits are the memory tier's, from the kept list).
    entry.fromNodeTier = false;
    headers = buildHeaders(exit, entry, ageSec, 'HIT', false, true);
  } else if (status === 'HIT') {
    if (entry.hitHeadersAge !== ageSec || entry.hitHeaders === null) {
      entry.hitHeaders = buildHeaders(exit, entry, ageSec, 'HIT', false);
      entry.hitHeadersAge = ageSec;
    }
    headers = entry.hitHeaders;
  } else {
    headers = buildHeaders(exit, entry, ageSec, status, false);
  }
  exit.send(ex, entry.status, headers, body, status, fromCache, entry);
}

/**
 * If-None-Match, else If-Modified-Since (an HTTP-date, strictly; anything else
 * is ignored) against the stored Last-Modified or, without one, the Date
 * (RFC 9110 §13.1.3, RFC 9111 §4.3.2), parsed once when the object was stored.
 */
function notModified(inm: string | undefined, ims: string | undefined, entry: CachedObject): boolean {
  if (inm !== undefined) return ifNoneMatchMatches(inm, entry.etag);
  const modified = entry.modifiedMs;
  if (modified === undefined || modified === null) return false;
  const since = httpDateMs(ims!);
  return !Number.isNaN(since) && modified <= since;
}

export function ifRangeAllows(vh: ViewerHeaders, entry: CachedObject): boolean {
  const ifRange = vh.ifRange;
  if (ifRange === undefined) return true;
  const v = ifRange.trim();
  if (v.startsWith('"') || v.startsWith('W/')) return entry.etag !== undefined && !entry.etag.startsWith('W/') && v === entry.etag; // strong comparison
  return entry.lastModified !== undefined && v === entry.lastModified;
}

export function buildHeaders(exit: Exit, entry: CachedObject, ageSec: number, status: CacheStatus, forRange: boolean, fromNode = false): string[] {
  const out: string[] = [];
  for (const [k, v] of entry.headers) {
    if (forRange && k === 'content-length') continue;
    if (k === 'cache-control' && entry.browserCacheControl !== null) continue;
    out.push(k, v);
  }
  if (entry.browserCacheControl !== null) out.push('cache-control', entry.browserCacheControl);
  // An encoded variant is never cut into ranges (they come from the identity object).
  if (!forRange && entry.status === 200 && entry.coding === undefined) out.push('accept-ranges', 'bytes');
  addCacheHeaders(exit, out, entry, ageSec, status, fromNode);
  return out;
}

/** Age, and the cache status fields unless the object's cache rule hides them (cache_status_header: false hides both, the region and TTL with them). */
function addCacheHeaders(exit: Exit, out: string[], entry: CachedObject, ageSec: number, status: CacheStatus, fromNode = false): void {
  out.push('age', String(ageSec));
  if (!entry.statusHeader) return;
  if (status === 'HIT') {
    const ttl = Math.floor(entry.lifetimeMs / 1000) - ageSec;
    // A hit names its tier when it is the node tier (RFC 9211 detail); without one it is the worker's memory tier.
    out.push('cache-status', `${exit.cacheStatusValues.HIT}; ttl=${Math.max(0, ttl)}${fromNode ? '; detail=node' : ''}`);
  } else out.push('cache-status', exit.cacheStatusValues[status]);
  out.push('x-cache-status', status);
}
