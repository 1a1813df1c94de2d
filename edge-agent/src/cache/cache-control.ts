// RFC 9111 freshness arithmetic for a shared cache, written here rather than
// taken from http-cache-semantics so that its known gaps are closed: directive
// names are case-insensitive, must-revalidate only bites once stale, any final
// status with explicit freshness is storable, invalid Expires means "already
// expired" (only the three HTTP-date forms are dates: http-date.ts), fractional
// or garbage Age is ignored, and the origin's Date is kept. CDN-Cache-Control
// is read as the Structured Field Dictionary RFC 9213 makes it.
import { httpDateMs } from './http-date.ts';
import { parseDictionary } from './structured-fields.ts';

export interface Directives {
  [name: string]: string | true;
}

const EMPTY: Directives = Object.freeze({}) as Directives;

/** Parses a Cache-Control (or CDN-Cache-Control) value; names lower-cased, quotes removed. */
export function parseCacheControl(value: string | string[] | undefined): Directives {
  if (value === undefined) return EMPTY;
  const text = Array.isArray(value) ? value.join(',') : value;
  if (text.length === 0) return EMPTY;
  const out: Directives = {};
  // Split on commas outside quotes.
  let i = 0;
  const n = text.length;
  while (i < n) {
    let j = i;
    let inQuote = false;
    while (j < n) {
      const c = text.charCodeAt(j);
      if (c === 34) inQuote = !inQuote;
      else if (c === 92 && inQuote) j++;
      else if (c === 44 && !inQuote) break;
      j++;
    }
    const part = text.slice(i, j).trim();
    i = j + 1;
    if (!part) continue;
    const eq = part.indexOf('=');
    if (eq === -1) {
      const name = part.toLowerCase();
      if (!(name in out)) out[name] = true;
    } else {
      const name = part.slice(0, eq).trim().toLowerCase();
      let v = part.slice(eq + 1).trim();
      if (v.length >= 2 && v.charCodeAt(0) === 34 && v.charCodeAt(v.length - 1) === 34) v = v.slice(1, -1).replace(/\\(.)/g, '$1');
      // First occurrence wins for duplicated directives (RFC 9111 4.2.1 says treat as invalid; first is the safe common choice).
      if (!(name in out)) out[name] = v;
    }
  }
  return out;
}

/** Delta-seconds: a non-negative integer; anything else is invalid (null). */
export function deltaSeconds(v: string | true | undefined): number | null {
  if (v === undefined || v === true) return null;
  if (!/^\d+$/.test(v)) return null;
  const n = Number(v);
  return n > 2147483648 ? 2147483648 : n;
}

/** HTTP-date to ms (strictly: IMF-fixdate, RFC 850, asctime); null when absent, NaN when present but invalid. */
export function parseHttpDate(v: string | undefined): number | null {
  return v === undefined ? null : httpDateMs(v);
}

/** Directives whose argument is delta-seconds: an SF Integer, not negative (RFC 9213 §2.1). */
const INTEGER_DIRECTIVES = new Set(['max-age', 's-maxage', 'stale-while-revalidate', 'stale-if-error', 'min-fresh', 'max-stale']);
/** Directives without an argument: an SF Boolean. */
const BOOLEAN_DIRECTIVES = new Set(['no-store', 'public', 'must-revalidate', 'proxy-revalidate', 'must-understand', 'no-transform', 'immutable', 'only-if-cached']);
/** Directives with an optional list of field names: Boolean true, or a String. */
const FIELD_LIST_DIRECTIVES = new Set(['no-cache', 'private']);

/**
 * A targeted cache-control field (CDN-Cache-Control, RFC 9213 §2) as
 * directives, or null when it is absent, empty or invalid: a value that is no
 * Structured Field Dictionary, or a known directive with an argument of the
 * wrong type (a String or Decimal max-age, a negative one, `no-store=1`),
 * makes the whole field ignored, and Cache-Control applies. A Boolean false
 * directive is absent; unknown directives are kept with any value.
 */
export function parseTargetedCacheControl(value: string | string[] | undefined): Directives | null {
  if (value === undefined) return null;
  const text = Array.isArray(value) ? value.join(', ') : value;
  const dict = parseDictionary(text);
  if (dict === null || dict.size === 0) return null;
  const out: Directives = {};
  for (const [name, member] of dict) {
    if (INTEGER_DIRECTIVES.has(name)) {
      if (member.type !== 'integer' || member.value < 0) return null;
      out[name] = String(member.value);
    } else if (BOOLEAN_DIRECTIVES.has(name)) {
      if (member.type !== 'boolean') return null;
      if (member.value) out[name] = true;
    } else if (FIELD_LIST_DIRECTIVES.has(name)) {
      if (member.type === 'string') out[name] = member.value;
      else if (member.type !== 'boolean') return null;
      else if (member.value) out[name] = true;
    } else if (member.type === 'boolean') {
      if (member.value) out[name] = true;
    } else if (member.type !== 'inner-list') out[name] = String(member.value);
    else out[name] = true;
  }
  return out;
}

/** Status codes that RFC 9110 lets a cache give heuristic freshness (and that a rule TTL applies to). */
export const HEURISTIC_STATUSES = new Set([200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]);

/**
 * Status codes whose caching requirements this cache implements, for
 * must-understand (RFC 9111 §5.2.2.3): the final codes RFC 9110 defines, less
 * 206 (partial answers are never stored), 304 (it updates a stored answer),
 * 305 and 306 (deprecated, unused) and 407 (a challenge for a proxy hop).
 */
export const UNDERSTOOD_STATUSES = new Set([
  200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 307, 308,
  400, 401, 402, 403, 404, 405, 406, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 426,
  500, 501, 502, 503, 504, 505,
]);

export interface FreshnessInput {
  status: number;
  cc: Directives;
  dateMs: number | null;
  expires: string | undefined;
  lastModified: string | undefined;
  responseTimeMs: number;
  /** Edge TTL from a cache rule, used only when the origin gives no explicit freshness. */
  ruleTtlSeconds: number | null;
}

export interface Freshness {
  /** Freshness lifetime in ms. */
  lifetimeMs: number;
  /** The origin stated freshness itself (max-age, s-maxage or Expires). */
  explicit: boolean;
}

/** Freshness lifetime for a shared cache (RFC 9111 4.2.1, 4.2.2). */
export function freshnessLifetime(input: FreshnessInput): Freshness {
  const { cc } = input;
  const sMaxAge = deltaSeconds(cc['s-maxage']);
  if (sMaxAge !== null) return { lifetimeMs: sMaxAge * 1000, explicit: true };
  const maxAge = deltaSeconds(cc['max-age']);
  if (maxAge !== null) return { lifetimeMs: maxAge * 1000, explicit: true };
  // A present but malformed max-age/s-maxage: treat as stale rather than fall through to heuristics.
  if (cc['max-age'] !== undefined || cc['s-maxage'] !== undefined) return { lifetimeMs: 0, explicit: true };
  if (input.expires !== undefined) {
    const exp = parseHttpDate(input.expires);
    if (exp === null || Number.isNaN(exp)) return { lifetimeMs: 0, explicit: true }; // invalid Expires = in the past
    const base = input.dateMs ?? input.responseTimeMs;
    return { lifetimeMs: Math.max(0, exp - base), explicit: true };
  }
  if (input.ruleTtlSeconds !== null && HEURISTIC_STATUSES.has(input.status)) {
    return { lifetimeMs: input.ruleTtlSeconds * 1000, explicit: false };
  }
  if (HEURISTIC_STATUSES.has(input.status) || cc.public !== undefined) {
    const lm = parseHttpDate(input.lastModified);
    if (lm !== null && !Number.isNaN(lm)) {
      const base = input.dateMs ?? input.responseTimeMs;
      // 10% of the time since last modification, capped at one day (RFC 9111 4.2.2 suggests 10%).
      const h = Math.max(0, (base - lm) / 10);
      return { lifetimeMs: Math.min(h, 86_400_000), explicit: false };
    }
  }
  return { lifetimeMs: 0, explicit: false };
}

/** Age value from an Age header; invalid (fractional, negative, text) is ignored. */
export function parseAge(v: string | string[] | undefined): number {
  if (v === undefined) return 0;
  const first = (Array.isArray(v) ? v[0] : v).split(',')[0].trim();
  const n = deltaSeconds(first);
  return n ?? 0;
}

/**
 * corrected_initial_age of RFC 9111 4.2.3, in ms: counts the Age the upstream
 * reported plus the time the response spent in flight.
 */
export function correctedInitialAgeMs(ageSeconds: number, dateMs: number | null, requestTimeMs: number, responseTimeMs: number): number {
  const apparent = dateMs === null ? 0 : Math.max(0, responseTimeMs - dateMs);
  const responseDelay = responseTimeMs - requestTimeMs;
  const correctedAgeValue = ageSeconds * 1000 + responseDelay;
  return Math.max(apparent, correctedAgeValue);
}

/** Weak comparison of an If-None-Match list against an entity tag (RFC 9110 13.1.2). */
export function ifNoneMatchMatches(header: string, etag: string | undefined): boolean {
  if (etag === undefined) return false;
  const trimmed = header.trim();
  if (trimmed === '*') return true;
  const bare = etag.startsWith('W/') ? etag.slice(2) : etag;
  for (const raw of trimmed.split(',')) {
    const t = raw.trim();
    const tb = t.startsWith('W/') ? t.slice(2) : t;
    if (tb === bare) return true;
  }
  return false;
}
