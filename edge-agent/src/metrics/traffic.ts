// Traffic counters kept on the request path as plain numbers in typed arrays
// (no label hashing, no allocation per request). Prometheus reads the cumulative
// totals at scrape time; the control client takes per-minute windows.
import { RESPONSE_TIME_BUCKETS_MS, responseTimeBucket } from '../../../shared/src/metrics/buckets.ts';

export const CACHE_STATUSES = ['HIT', 'MISS', 'EXPIRED', 'STALE', 'BYPASS', 'REVALIDATED', 'UPDATING'] as const;
export type CacheStatus = (typeof CACHE_STATUSES)[number];
export const CACHE_STATUS_INDEX: Record<CacheStatus, number> = {
  HIT: 0, MISS: 1, EXPIRED: 2, STALE: 3, BYPASS: 4, REVALIDATED: 5, UPDATING: 6,
};

/** The totals key of answers given before an endpoint was chosen. */
export const UNROUTED = '';

/** Distinct URLs tracked per endpoint and window; later new URLs are only counted in the totals. */
const TOP_URL_CAPACITY = 2000;

/** A top-URL key of a plain-HTTP request: this prefix, then the path (an HTTPS request's key is its path alone). */
const PLAIN_HTTP = 'http:';

/** The URL and scheme a top-URL key stands for. */
function urlOfKey(key: string): { url: string; scheme: 'http' | 'https' } {
  return key.startsWith(PLAIN_HTTP) ? { url: key.slice(PLAIN_HTTP.length), scheme: 'http' } : { url: key, scheme: 'https' };
}

export interface UrlCounter {
  requests: number;
  bytes: number;
  cacheHits: number;
  cacheStatuses: Float64Array;
}

/**
 * A cached object's handle on its URL counter in the current window, so a hit
 * counts its URL without hashing the path into the top-URL map.
 */
export interface UrlSlot {
  windowId: number;
  counter: UrlCounter;
}

/** The counts of one (origin, cache rule) slice of an endpoint's window. */
export class SliceCounters {
  requests = 0;
  readonly statusClasses = new Float64Array(6);
  readonly cacheStatuses = new Float64Array(CACHE_STATUSES.length);
  bytesFromCache = 0;
  bytesFromOrigin = 0;
  readonly buckets = new Float64Array(RESPONSE_TIME_BUCKETS_MS.length + 1);
  responseTimeSumMs = 0;
  readonly originId: string;
  readonly cacheRuleId: string;

  constructor(originId: string, cacheRuleId: string) {
    this.originId = originId;
    this.cacheRuleId = cacheRuleId;
  }
}

export class EndpointCounters {
  requests = 0;
  /** Index 1..5 for 1xx..5xx. */
  readonly statusClasses = new Float64Array(6);
  readonly cacheStatuses = new Float64Array(CACHE_STATUSES.length);
  bytesFromCache = 0;
  bytesFromOrigin = 0;
  readonly buckets = new Float64Array(RESPONSE_TIME_BUCKETS_MS.length + 1);
  responseTimeSumMs = 0;
  readonly topUrls: Map<string, UrlCounter> | null;
  /** Per cache rule id: [requests, hits]. */
  readonly cacheRules = new Map<string, [number, number]>();
  /** Per "<origin id>|<cache rule id>" (windows only). */
  readonly slices = new Map<string, SliceCounters>();
  /** Per country: [requests, bytes, errors (4xx and 5xx)] (windows only). */
  readonly countries = new Map<string, [number, number, number]>();

  constructor(trackUrls: boolean) {
    this.topUrls = trackUrls ? new Map() : null;
  }
}

/** Shield hops an agent answered for an endpoint (other agents' fetches through it): apart from viewer traffic. */
export class ShieldHopCounters {
  /** By status class (1..5) and cache status: index class * CACHE_STATUSES.length + cache status. */
  readonly requests = new Float64Array(6 * CACHE_STATUSES.length);
  bytes = 0;
}

export interface SliceRollup {
  originId: string;
  cacheRuleId: string;
  requests: number;
  statusClasses: { '1xx': number; '2xx': number; '3xx': number; '4xx': number; '5xx': number };
  cacheStatuses: Record<string, number>;
  bytesFromCache: number;
  bytesFromOrigin: number;
  responseTimeBuckets: number[];
  responseTimeSumMs: number;
}

export interface TrafficRollup {
  minuteStartMs: number;
  endpointId: string;
  requests: number;
  statusClasses: { '1xx': number; '2xx': number; '3xx': number; '4xx': number; '5xx': number };
  cacheStatuses: Record<string, number>;
  bytesFromCache: number;
  bytesFromOrigin: number;
  responseTimeBuckets: number[];
  responseTimeSumMs: number;
  topUrls: { url: string; scheme: 'http' | 'https'; requests: number; bytes: number; cacheHits: number; cacheStatuses: Record<string, number> }[];
  cacheRuleRequests: Record<string, number>;
  cacheRuleHits: Record<string, number>;
  /** The minute split by origin and cache rule. */
  slices: SliceRollup[];
  countries: { countryCode: string; requests: number; bytes: number; errors: number }[];
}

const classes = (a: Float64Array) => ({ '1xx': a[1]!, '2xx': a[2]!, '3xx': a[3]!, '4xx': a[4]!, '5xx': a[5]! });

/** The start of the UTC minute a time falls in (ms). */
export const minuteOf = (ms: number): number => ms - (ms % 60_000);

function statusMap(arr: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  for (let i = 0; i < CACHE_STATUSES.length; i++) if (arr[i] > 0) out[CACHE_STATUSES[i]] = arr[i];
  return out;
}

function count(c: EndpointCounters | SliceCounters, cls: number, cs: number, bytes: number, fromCache: boolean, bucket: number, ms: number): void {
  c.requests++;
  c.statusClasses[cls]++;
  c.cacheStatuses[cs]++;
  if (fromCache) c.bytesFromCache += bytes;
  else c.bytesFromOrigin += bytes;
  c.buckets[bucket]++;
  c.responseTimeSumMs += ms;
}

/**
 * Windows are UTC minutes: the first answer of a new minute closes the
 * window of the one before (kept until the next take), so every rollup
 * belongs to one minute and the control plane adds the nodes' rollups of a
 * minute together.
 */
export class TrafficCounters {
  readonly totals = new Map<string, EndpointCounters>();
  /** Shield hops answered, per endpoint (Prometheus only: never in the viewer totals or the rollups). */
  readonly shieldHops = new Map<string, ShieldHopCounters>();
  private window = new Map<string, EndpointCounters>();
  private windowStartMs = minuteOf(Date.now());
  private closed: { minute: number; window: Map<string, EndpointCounters> }[] = [];
  private windowId = 1;

  private rotate(now: number): void {
    if (this.window.size > 0) this.closed.push({ minute: this.windowStartMs, window: this.window });
    this.window = new Map();
    this.windowStartMs = minuteOf(now);
    this.windowId++;
  }

  /**
   * holder: an object (the cached entry) that may keep a UrlSlot for its path across requests of this window.
   * originId: the route's origin (null: none chose one); country: the viewer's (null: unknown); secure: the viewer used HTTPS
   * (its URL is counted apart from the same path over plain HTTP; only HTTPS requests use the holder's slot).
   */
  record(endpointId: string, status: number, cacheStatus: CacheStatus, bytes: number, fromCache: boolean, ms: number, path: string, cacheRuleId: string | null, holder: { urlSlot?: UrlSlot | null } | null = null, originId: string | null = null, country: string | null = null, secure = true): void {
    if (!secure) {
      holder = null;
      path = PLAIN_HTTP + path;
    }
    const now = Date.now();
    if (now - this.windowStartMs >= 60_000) this.rotate(now);
    let total = this.totals.get(endpointId);
    if (total === undefined) this.totals.set(endpointId, (total = new EndpointCounters(false)));
    let win = this.window.get(endpointId);
    if (win === undefined) this.window.set(endpointId, (win = new EndpointCounters(true)));
    const cls = (status / 100) | 0;
    const cs = CACHE_STATUS_INDEX[cacheStatus];
    const bucket = responseTimeBucket(ms);
    count(total, cls, cs, bytes, fromCache, bucket, ms);
    count(win, cls, cs, bytes, fromCache, bucket, ms);
    const sliceKey = originId === null && cacheRuleId === null ? '|' : `${originId ?? ''}|${cacheRuleId ?? ''}`;
    let slice = win.slices.get(sliceKey);
    if (slice === undefined) win.slices.set(sliceKey, (slice = new SliceCounters(originId ?? '', cacheRuleId ?? '')));
    count(slice, cls, cs, bytes, fromCache, bucket, ms);
    if (country !== null) {
      let c = win.countries.get(country);
      if (c === undefined) win.countries.set(country, (c = [0, 0, 0]));
      c[0]++;
      c[1] += bytes;
      if (cls >= 4) c[2]++;
    }
    if (cacheRuleId !== null) {
      let r = win.cacheRules.get(cacheRuleId);
      if (r === undefined) win.cacheRules.set(cacheRuleId, (r = [0, 0]));
      r[0]++;
      if (cs === 0) r[1]++;
    }
    let u: UrlCounter | undefined;
    const slot = holder === null ? null : holder.urlSlot;
    if (slot != null && slot.windowId === this.windowId) u = slot.counter;
    else {
      const urls = win.topUrls!;
      u = urls.get(path);
      if (u === undefined) {
        if (urls.size >= TOP_URL_CAPACITY) return;
        urls.set(path, (u = { requests: 0, bytes: 0, cacheHits: 0, cacheStatuses: new Float64Array(CACHE_STATUSES.length) }));
      }
      if (holder !== null) holder.urlSlot = { windowId: this.windowId, counter: u };
    }
    u.requests++;
    u.bytes += bytes;
    if (cs === 0) u.cacheHits++;
    u.cacheStatuses[cs]++;
  }

  /** An answer to another agent's shield hop: its viewer was counted by that agent, so it is counted apart here. */
  recordShieldHop(endpointId: string, status: number, cacheStatus: CacheStatus, bytes: number): void {
    let c = this.shieldHops.get(endpointId);
    if (c === undefined) this.shieldHops.set(endpointId, (c = new ShieldHopCounters()));
    c.requests[((status / 100) | 0) * CACHE_STATUSES.length + CACHE_STATUS_INDEX[cacheStatus]]++;
    c.bytes += bytes;
  }

  /**
   * An answer given before any endpoint was chosen (malformed Host or target → 400,
   * unknown Host → 421). Counted in the cumulative totals under the endpoint id ""
   * (Prometheus shows it without an endpoint label); the per-endpoint windows sent
   * to the control plane have no endpoint to carry it.
   */
  recordUnrouted(status: number, cacheStatus: CacheStatus, ms: number): void {
    let total = this.totals.get(UNROUTED);
    if (total === undefined) this.totals.set(UNROUTED, (total = new EndpointCounters(false)));
    count(total, (status / 100) | 0, CACHE_STATUS_INDEX[cacheStatus], 0, false, responseTimeBucket(ms), ms);
  }

  /** Returns the counts since the previous call, one rollup per endpoint and minute (the current minute's so far included). */
  takeRollups(topN = 50): TrafficRollup[] {
    this.rotate(Date.now());
    const closed = this.closed;
    this.closed = [];
    const out: TrafficRollup[] = [];
    for (const { minute, window } of closed) for (const [endpointId, c] of window) {
      const start = minute;
      const top = [...c.topUrls!.entries()].sort((a, b) => b[1].requests - a[1].requests).slice(0, topN);
      const cacheRuleRequests: Record<string, number> = {};
      const cacheRuleHits: Record<string, number> = {};
      for (const [id, [req, hits]] of c.cacheRules) {
        cacheRuleRequests[id] = req;
        cacheRuleHits[id] = hits;
      }
      out.push({
        minuteStartMs: start,
        endpointId,
        requests: c.requests,
        statusClasses: { '1xx': c.statusClasses[1], '2xx': c.statusClasses[2], '3xx': c.statusClasses[3], '4xx': c.statusClasses[4], '5xx': c.statusClasses[5] },
        cacheStatuses: statusMap(c.cacheStatuses),
        bytesFromCache: c.bytesFromCache,
        bytesFromOrigin: c.bytesFromOrigin,
        responseTimeBuckets: [...c.buckets],
        responseTimeSumMs: c.responseTimeSumMs,
        topUrls: top.map(([key, u]) => ({ ...urlOfKey(key), requests: u.requests, bytes: u.bytes, cacheHits: u.cacheHits, cacheStatuses: statusMap(u.cacheStatuses) })),
        cacheRuleRequests,
        cacheRuleHits,
        slices: [...c.slices.values()].map((x) => ({
          originId: x.originId, cacheRuleId: x.cacheRuleId, requests: x.requests, statusClasses: classes(x.statusClasses), cacheStatuses: statusMap(x.cacheStatuses),
          bytesFromCache: x.bytesFromCache, bytesFromOrigin: x.bytesFromOrigin, responseTimeBuckets: [...x.buckets], responseTimeSumMs: x.responseTimeSumMs,
        })),
        countries: [...c.countries].map(([countryCode, [requests, bytes, errors]]) => ({ countryCode, requests, bytes, errors })),
      });
    }
    return out;
  }
}
