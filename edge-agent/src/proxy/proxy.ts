// The viewer-facing request path (DESIGN.md §8): endpoint by Host → policies →
// route → cache rule → cache lookup → origin (collapsed) → store → respond.
// Cache hits are answered synchronously from a stored Buffer with a header
// list rebuilt at most once per second per object (only Age changes).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { Histogram } from 'prom-client';
import { normalizeHost } from '../../../shared/src/match/host.ts';
import type { CacheStatus, TrafficCounters } from '../metrics/traffic.ts';
import { compileRequestPolicies, type RequestPolicy } from '../policy/index.ts';
import type { CachedObject, CacheStore } from './cache-store.ts';
import {
  correctedInitialAgeMs, deltaSeconds, freshnessLifetime, HEURISTIC_STATUSES, ifNoneMatchMatches, parseAge, parseCacheControl, parseHttpDate,
  type Directives,
} from './cache-control.ts';
import {
  bypassMatches, headerString, HOP_BY_HOP, parseRange, parseVary, passthroughHeaders, primaryCacheKey, responseTags, scanViewerHeaders, storedHeaderPairs, varyValues,
  type ViewerHeaders,
} from './http-util.ts';
import { fetchOrigin, OriginError, type OriginPools, type OriginResponse } from './origin-client.ts';
import { contentTypeMatches, matchCacheRule, matchRoute, type CompiledCacheRule, type CompiledEndpoint, type CompiledRoute, type RoutingTable } from './routing.ts';

export interface ProxyOptions {
  defaultEndpointId: string | null;
  maxObjectBytes: number;
  /** Cache name in Cache-Status (RFC 9211). */
  cacheName: string;
}

export interface ProxyDeps {
  table: () => RoutingTable;
  store: CacheStore;
  pools: OriginPools;
  traffic: TrafficCounters;
  originLatency: Histogram<'origin' | 'status_class'> | null;
  logger: Logger;
  options: ProxyOptions;
}

interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
  /** The request fields the cache path reads, scanned from rawHeaders (req.headers stays lazy on hits). */
  vh: ViewerHeaders;
  endpoint: CompiledEndpoint;
  route: CompiledRoute;
  rule: CompiledCacheRule | null;
  host: string;
  path: string;
  query: string;
  method: string;
  t0: number;
}

interface SharedFetch {
  entry: CachedObject | null;
  status: CacheStatus;
  /** The origin failed (error or 5xx): followers may fall back to stale-if-error. */
  error: OriginError | null;
  failedStatus: number;
}

type LeaderResult =
  | { type: 'stored'; entry: CachedObject; status: CacheStatus }
  | { type: 'passthrough'; response: OriginResponse; body: Readable }
  | { type: 'error'; error: OriginError };

const EMPTY_CC: Directives = Object.freeze({}) as Directives;
const UNSAFE_SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
const NOT_MODIFIED_FIELDS = new Set(['cache-control', 'content-location', 'date', 'etag', 'expires', 'vary', 'last-modified']);
/** Fields a 304 must not overwrite in the stored response (RFC 9111 3.2). */
const NOT_UPDATED_BY_304 = new Set(['content-length', 'content-encoding', 'content-range', 'transfer-encoding']);
const ERROR_STATUSES_FOR_STALE = new Set([500, 502, 503, 504]);

const CACHE_STATUS_DETAIL: Record<CacheStatus, string> = {
  HIT: 'hit',
  MISS: 'fwd=miss',
  EXPIRED: 'fwd=stale',
  STALE: 'hit; detail=stale-if-error',
  BYPASS: 'fwd=bypass',
  REVALIDATED: 'fwd=stale; fwd-status=304',
  UPDATING: 'hit; detail=stale-while-revalidate',
};

export class Proxy {
  private readonly deps: ProxyDeps;
  private readonly inflight = new Map<string, Promise<SharedFetch>>();
  private readonly policies = new WeakMap<CompiledEndpoint, RequestPolicy[]>();
  private readonly cacheStatusValues: Record<CacheStatus, string>;

  constructor(deps: ProxyDeps) {
    this.deps = deps;
    const name = deps.options.cacheName;
    this.cacheStatusValues = Object.fromEntries(Object.entries(CACHE_STATUS_DETAIL).map(([k, v]) => [k, `${name}; ${v}`])) as Record<CacheStatus, string>;
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const t0 = performance.now();
    const table = this.deps.table();
    const vh = scanViewerHeaders(req.rawHeaders);
    const rawHost = vh.host;
    const host = rawHost === undefined ? '' : normalizeHost(rawHost);
    let endpoint = table.byHost.get(host);
    if (endpoint === undefined) {
      const fallback = this.deps.options.defaultEndpointId;
      endpoint = fallback === null ? undefined : table.byId.get(fallback);
      if (endpoint === undefined) {
        drainAndSend(req, res, 421, 'No endpoint is configured for this host\n');
        return;
      }
    }
    if (!endpoint.enabled) {
      drainAndSend(req, res, 403, 'This endpoint is disabled\n');
      return;
    }
    const url = req.url ?? '/';
    let path: string;
    let query: string;
    if (url.charCodeAt(0) === 47 /* / */) {
      const q = url.indexOf('?');
      path = q === -1 ? url : url.slice(0, q);
      query = q === -1 ? '' : url.slice(q + 1);
    } else if (/^https?:\/\//i.test(url)) {
      const u = URL.parse(url);
      if (!u) return drainAndSend(req, res, 400, 'Bad request target\n');
      path = u.pathname;
      query = u.search.slice(1);
    } else {
      drainAndSend(req, res, 400, 'Bad request target\n');
      return;
    }
    let policies = this.policies.get(endpoint);
    if (policies === undefined) this.policies.set(endpoint, (policies = compileRequestPolicies(endpoint)));
    if (policies.length) {
      const pctx = { req, res, endpoint, host, path, query, clientIp: req.socket.remoteAddress ?? '' };
      for (const p of policies) if (p(pctx)) return;
    }
    const method = req.method ?? 'GET';
    const route = matchRoute(endpoint, host, path, method);
    const isRead = method === 'GET' || method === 'HEAD';
    const rule = isRead ? matchCacheRule(endpoint, path, method) : null;
    const ctx: Ctx = { req, res, vh, endpoint, route, rule, host, path, query, method, t0 };
    if (!isRead) {
      void this.forward(ctx, 'BYPASS', true);
      return;
    }
    if (rule !== null && rule.hasBypass && bypassMatches(req.headers, rule, query)) {
      void this.forward(ctx, 'BYPASS', false);
      return;
    }
    const store = this.deps.store;
    const primary = primaryCacheKey(endpoint, route, host, path, query, rule, req.headers);
    const varyNames = store.varyFor(primary);
    const key = varyNames === undefined ? primary : primary + '\x01' + varyValues(req.headers, varyNames);
    const entry = store.get(key);
    if (entry === undefined && store.hasDisk) {
      store.getFromDisk(key).then(
        (e) => this.withEntry(ctx, primary, key, e),
        (err) => this.fail(ctx, err),
      );
      return;
    }
    this.withEntry(ctx, primary, key, entry);
  };

  private withEntry(ctx: Ctx, primary: string, key: string, found: CachedObject | undefined): void {
    const vh = ctx.vh;
    const hasAuth = vh.authorization !== undefined;
    // RFC 9111 3.5: a request with Authorization gets a stored response only if that response allows it.
    const entry = found !== undefined && hasAuth && !found.authorizationAllowed ? undefined : found;
    const reqCC = vh.cacheControl !== undefined ? parseCacheControl(vh.cacheControl)
      : vh.pragma !== undefined && /no-cache/i.test(vh.pragma) ? { 'no-cache': true } as Directives : EMPTY_CC;
    const now = Date.now();
    if (entry !== undefined) {
      const ageMs = entry.correctedInitialAgeMs + (now - entry.responseTimeMs);
      let fresh = !entry.noCache && ageMs < entry.lifetimeMs;
      if (fresh && reqCC !== EMPTY_CC) {
        if (reqCC['no-cache'] !== undefined) fresh = false;
        const maxAge = deltaSeconds(reqCC['max-age']);
        if (maxAge !== null && ageMs > maxAge * 1000) fresh = false;
        const minFresh = deltaSeconds(reqCC['min-fresh']);
        if (minFresh !== null && entry.lifetimeMs - ageMs < minFresh * 1000) fresh = false;
      }
      if (fresh) {
        this.serveEntry(ctx, entry, 'HIT', now);
        return;
      }
      if (reqCC['only-if-cached'] !== undefined) {
        this.sendError(ctx, 504, 'Not in cache (only-if-cached)\n', 'BYPASS');
        return;
      }
      const staleMs = ageMs - entry.lifetimeMs;
      if (!entry.mustRevalidate && !entry.noCache && reqCC['no-cache'] === undefined && staleMs < entry.staleWhileRevalidateMs) {
        this.serveEntry(ctx, entry, 'UPDATING', now);
        if (!this.inflight.has(key)) void this.collapsed(ctx, primary, key, entry, true, true).catch(() => {});
        return;
      }
      void this.collapsedAndServe(ctx, primary, key, entry, hasAuth);
      return;
    }
    if (reqCC['only-if-cached'] !== undefined) {
      this.sendError(ctx, 504, 'Not in cache (only-if-cached)\n', 'MISS');
      return;
    }
    if (vh.range !== undefined && !hasAuth && reqCC['no-store'] === undefined) {
      // Serve the range from the origin now and fill the cache with the whole object in the background,
      // so the next seek is a hit without making this viewer wait for the full object.
      if (!this.inflight.has(key)) void this.collapsed(ctx, primary, key, null, true, true).catch(() => {});
      void this.forward(ctx, 'MISS', false);
      return;
    }
    void this.collapsedAndServe(ctx, primary, key, undefined, hasAuth);
  }

  /** Miss or stale: one origin fetch per key; concurrent requests wait for it and share a storable result. */
  private async collapsedAndServe(ctx: Ctx, primary: string, key: string, stale: CachedObject | undefined, hasAuth: boolean): Promise<void> {
    try {
      const pending = hasAuth ? undefined : this.inflight.get(key);
      if (pending !== undefined) {
        const shared = await pending;
        if (shared.entry !== null && shared.entry.varyValues === (shared.entry.varyNames ? varyValues(ctx.req.headers, shared.entry.varyNames) : '')) {
          this.serveEntry(ctx, shared.entry, shared.status, Date.now());
          return;
        }
        if ((shared.error !== null || shared.failedStatus) && stale !== undefined && this.staleIfErrorAllowed(stale)) {
          this.serveEntry(ctx, stale, 'STALE', Date.now());
          return;
        }
        if (shared.error !== null) {
          this.sendError(ctx, shared.error.status, originErrorBody(shared.error), 'MISS');
          return;
        }
        // Not shareable (private, no-store, Vary mismatch...): this request goes to the origin itself.
        await this.forward(ctx, stale ? 'EXPIRED' : 'MISS', false);
        return;
      }
      const result = await this.collapsed(ctx, primary, key, stale ?? null, !hasAuth);
      await this.serveLeader(ctx, result, stale);
    } catch (err) {
      this.fail(ctx, err);
    }
  }

  /** background: nobody waits on this fetch's answer (stale-while-revalidate refresh, range fill), so no interim responses go out. */
  private collapsed(ctx: Ctx, primary: string, key: string, stale: CachedObject | null, register: boolean, background = false): Promise<LeaderResult> {
    let resolveShared!: (s: SharedFetch) => void;
    if (register) {
      const shared = new Promise<SharedFetch>((r) => (resolveShared = r));
      this.inflight.set(key, shared);
    }
    const done = (s: SharedFetch) => {
      if (register) {
        if (this.inflight.get(key) !== undefined) this.inflight.delete(key);
        resolveShared(s);
      }
    };
    return this.fetchForCache(ctx, primary, key, stale, !background).then(
      (result) => {
        if (result.type === 'stored') done({ entry: result.entry, status: result.status, error: null, failedStatus: 0 });
        else if (result.type === 'error') done({ entry: null, status: 'MISS', error: result.error, failedStatus: 0 });
        else done({ entry: null, status: 'MISS', error: null, failedStatus: ERROR_STATUSES_FOR_STALE.has(result.response.statusCode) ? result.response.statusCode : 0 });
        // A background fill (no viewer waiting on this result) must not leave the origin body unread.
        if (!register || ctx.res.headersSent) {
          if (result.type === 'passthrough') result.body.resume();
        }
        return result;
      },
      (err: unknown) => {
        done({ entry: null, status: 'MISS', error: err instanceof OriginError ? err : new OriginError('protocol', String(err)), failedStatus: 0 });
        throw err;
      },
    );
  }

  private async serveLeader(ctx: Ctx, result: LeaderResult, stale: CachedObject | undefined): Promise<void> {
    if (result.type === 'stored') {
      this.serveEntry(ctx, result.entry, result.status, Date.now());
      return;
    }
    if (result.type === 'error') {
      if (stale !== undefined && this.staleIfErrorAllowed(stale)) {
        this.serveEntry(ctx, stale, 'STALE', Date.now());
        return;
      }
      this.deps.logger.warn({ endpoint: ctx.endpoint.id, origin: ctx.route.origin.id, path: ctx.path, kind: result.error.kind, err: result.error.message }, 'origin fetch failed');
      this.sendError(ctx, result.error.status, originErrorBody(result.error), stale ? 'EXPIRED' : 'MISS');
      return;
    }
    const r = result.response;
    if (stale !== undefined && ERROR_STATUSES_FOR_STALE.has(r.statusCode) && this.staleIfErrorAllowed(stale)) {
      result.body.resume();
      this.serveEntry(ctx, stale, 'STALE', Date.now());
      return;
    }
    await this.streamResponse(ctx, r, result.body, stale ? 'EXPIRED' : 'MISS');
  }

  private staleIfErrorAllowed(stale: CachedObject): boolean {
    if (stale.mustRevalidate) return false;
    const staleMs = stale.correctedInitialAgeMs + (Date.now() - stale.responseTimeMs) - stale.lifetimeMs;
    return staleMs < stale.staleIfErrorMs;
  }

  /** Fetches the full object for the cache (conditionally when a stale copy has validators) and stores it if allowed. */
  private async fetchForCache(ctx: Ctx, primary: string, key: string, stale: CachedObject | null, viewerWaiting: boolean): Promise<LeaderResult> {
    const { req, route } = ctx;
    const store = this.deps.store;
    const generation = store.currentGeneration;
    const headers = this.originHeaders(ctx, true);
    // HEAD misses fetch with GET so the object can be stored and later GETs hit.
    const conditional = stale !== null && (stale.etag !== undefined || stale.lastModified !== undefined);
    if (conditional) {
      if (stale!.etag !== undefined) headers['if-none-match'] = stale!.etag;
      if (stale!.lastModified !== undefined) headers['if-modified-since'] = stale!.lastModified;
    }
    let res: OriginResponse;
    try {
      res = await fetchOrigin(this.deps.pools, route.origin, { method: 'GET', path: this.originPath(ctx), headers, onInfo: viewerWaiting ? this.earlyHints(ctx) : undefined }, this.timing(route));
    } catch (err) {
      return { type: 'error', error: err instanceof OriginError ? err : new OriginError('protocol', String(err)) };
    }
    const reqCC = ctx.vh.cacheControl !== undefined ? parseCacheControl(ctx.vh.cacheControl) : EMPTY_CC;
    if (res.statusCode === 304 && conditional) {
      await res.body.dump().catch(() => {});
      const updated = this.updateFrom304(stale!, res, ctx.rule, generation);
      if (reqCC['no-store'] === undefined) store.set(updated);
      return { type: 'stored', entry: updated, status: 'REVALIDATED' };
    }
    const decision = this.storability(ctx, res, reqCC);
    if (decision === null) {
      // A stale object the origin no longer lets us keep must go (e.g. now no-store).
      if (stale !== null && res.statusCode < 500) store.delete(stale);
      return { type: 'passthrough', response: res, body: res.body };
    }
    const max = this.deps.options.maxObjectBytes;
    const declared = Number(headerString(res.headers['content-length']) ?? -1);
    if (declared > max) return { type: 'passthrough', response: res, body: res.body };
    const chunks: Buffer[] = [];
    let total = 0;
    const iterator = res.body[Symbol.asyncIterator]();
    for (;;) {
      const { value, done } = await iterator.next();
      if (done) break;
      const chunk = value as Buffer;
      chunks.push(chunk);
      total += chunk.length;
      if (total > max) {
        // Too big to keep: stream what we have and the rest through without buffering more.
        const rest = Readable.from((async function* () {
          yield* chunks;
          for (;;) {
            const n = await iterator.next();
            if (n.done) return;
            yield n.value as Buffer;
          }
        })());
        return { type: 'passthrough', response: res, body: rest };
      }
    }
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total);
    const entry = this.makeEntry(ctx, primary, key, res, decision, body, generation);
    if (reqCC['no-store'] === undefined) store.set(entry);
    return { type: 'stored', entry, status: stale !== null ? 'EXPIRED' : 'MISS' };
  }

  /** Directives governing storage, or null when the response must not be stored (RFC 9111 §3 for a shared cache). */
  private storability(ctx: Ctx, res: OriginResponse, reqCC: Directives): Directives | null {
    const status = res.statusCode;
    if (status < 200 || status === 206 || status === 304) return null;
    if (reqCC['no-store'] !== undefined) return null;
    const h = res.headers;
    // CDN-Cache-Control (RFC 9213) targets us and replaces Cache-Control for our decisions.
    const cc = parseCacheControl(h['cdn-cache-control'] ?? h['cache-control']);
    const ccDownstream = h['cdn-cache-control'] !== undefined ? parseCacheControl(h['cache-control']) : cc;
    if (cc['no-store'] !== undefined || cc.private !== undefined || ccDownstream.private !== undefined) return null;
    const vary = parseVary(h.vary);
    if (vary !== null && vary[0] === '*') return null; // Vary: * can never match a later request
    if (h['set-cookie'] !== undefined) return null; // never hand one viewer's cookie to another
    if (ctx.vh.authorization !== undefined && cc.public === undefined && cc['s-maxage'] === undefined && cc['must-revalidate'] === undefined) return null;
    const explicit = cc['max-age'] !== undefined || cc['s-maxage'] !== undefined || h.expires !== undefined;
    const rule = ctx.rule !== null && contentTypeMatches(ctx.rule, headerString(h['content-type'])) ? ctx.rule : null;
    if (!explicit && cc.public === undefined && !HEURISTIC_STATUSES.has(status)) return null;
    const hasValidator = h.etag !== undefined || h['last-modified'] !== undefined;
    const f = freshnessLifetime({
      status, cc, dateMs: dateOf(h), expires: headerString(h.expires), lastModified: headerString(h['last-modified']), responseTimeMs: res.responseTimeMs,
      ruleTtlSeconds: rule ? rule.ttlSeconds : null,
    });
    if (f.lifetimeMs <= 0 && !hasValidator) return null; // nothing to reuse it with
    return cc;
  }

  private makeEntry(ctx: Ctx, primary: string, key: string, res: OriginResponse, cc: Directives, body: Buffer, generation: number): CachedObject {
    const h = res.headers;
    const rule = ctx.rule !== null && contentTypeMatches(ctx.rule, headerString(h['content-type'])) ? ctx.rule : null;
    const headers = storedHeaderPairs(h);
    setHeader(headers, 'content-length', String(body.length));
    const dateMs = dateOf(h);
    if (dateMs === null) headers.push(['date', new Date(res.responseTimeMs).toUTCString()]);
    const vary = parseVary(h.vary);
    const f = freshnessLifetime({
      status: res.statusCode, cc, dateMs, expires: headerString(h.expires), lastModified: headerString(h['last-modified']), responseTimeMs: res.responseTimeMs,
      ruleTtlSeconds: rule ? rule.ttlSeconds : null,
    });
    const swr = deltaSeconds(cc['stale-while-revalidate']) ?? rule?.staleWhileRevalidateSeconds ?? 0;
    const sie = deltaSeconds(cc['stale-if-error']) ?? rule?.staleIfErrorSeconds ?? 0;
    return {
      key: vary === null ? primary : primary + '\x01' + varyValues(ctx.req.headers, vary),
      primaryKey: primary,
      endpointId: ctx.endpoint.id,
      path: ctx.path,
      tags: responseTags(h),
      status: res.statusCode,
      headers,
      body,
      size: body.length + headers.reduce((n, [k, v]) => n + k.length + v.length, 0),
      requestTimeMs: res.requestTimeMs,
      responseTimeMs: res.responseTimeMs,
      correctedInitialAgeMs: correctedInitialAgeMs(parseAge(h.age), dateMs, res.requestTimeMs, res.responseTimeMs),
      lifetimeMs: f.lifetimeMs,
      mustRevalidate: cc['must-revalidate'] !== undefined || cc['proxy-revalidate'] !== undefined || cc['s-maxage'] !== undefined,
      noCache: cc['no-cache'] === true,
      staleWhileRevalidateMs: swr * 1000,
      staleIfErrorMs: sie * 1000,
      etag: headerString(h.etag),
      lastModified: headerString(h['last-modified']),
      varyNames: vary,
      varyValues: vary === null ? '' : varyValues(ctx.req.headers, vary),
      authorizationAllowed: cc.public !== undefined || cc['s-maxage'] !== undefined || cc['must-revalidate'] !== undefined,
      generation,
      checkedGeneration: generation,
      cacheRuleId: rule?.id ?? null,
      browserCacheControl: rule !== null && rule.browserTtlSeconds !== null ? `public, max-age=${rule.browserTtlSeconds}` : null,
      statusHeader: ctx.rule === null ? true : ctx.rule.cacheStatusHeader,
      hitHeaders: null,
      hitHeadersAge: -1,
      urlSlot: null,
    };
  }

  /** RFC 9111 4.3.4: headers from the 304 replace the stored ones; freshness is recomputed from them. */
  private updateFrom304(stale: CachedObject, res: OriginResponse, rule: CompiledCacheRule | null, generation: number): CachedObject {
    const incoming = storedHeaderPairs(res.headers).filter(([k]) => !NOT_UPDATED_BY_304.has(k));
    const names = new Set(incoming.map(([k]) => k));
    const headers = stale.headers.filter(([k]) => !names.has(k)).concat(incoming);
    const get = (n: string) => {
      const vs = headers.filter(([k]) => k === n).map(([, v]) => v);
      return vs.length ? vs.join(', ') : undefined;
    };
    const cdn = headerString(res.headers['cdn-cache-control']);
    const cc = parseCacheControl(cdn ?? get('cache-control'));
    const dateMs = parseHttpDate(get('date'));
    const date = dateMs === null || Number.isNaN(dateMs) ? null : dateMs;
    const activeRule = rule !== null && stale.cacheRuleId === rule.id ? rule : null;
    const f = freshnessLifetime({ status: stale.status, cc, dateMs: date, expires: get('expires'), lastModified: get('last-modified'), responseTimeMs: res.responseTimeMs, ruleTtlSeconds: activeRule ? activeRule.ttlSeconds : null });
    return {
      ...stale,
      headers,
      requestTimeMs: res.requestTimeMs,
      responseTimeMs: res.responseTimeMs,
      correctedInitialAgeMs: correctedInitialAgeMs(parseAge(res.headers.age), date, res.requestTimeMs, res.responseTimeMs),
      lifetimeMs: f.lifetimeMs,
      mustRevalidate: cc['must-revalidate'] !== undefined || cc['proxy-revalidate'] !== undefined || cc['s-maxage'] !== undefined,
      noCache: cc['no-cache'] === true,
      staleWhileRevalidateMs: (deltaSeconds(cc['stale-while-revalidate']) ?? activeRule?.staleWhileRevalidateSeconds ?? 0) * 1000,
      staleIfErrorMs: (deltaSeconds(cc['stale-if-error']) ?? activeRule?.staleIfErrorSeconds ?? 0) * 1000,
      etag: get('etag'),
      lastModified: get('last-modified'),
      authorizationAllowed: cc.public !== undefined || cc['s-maxage'] !== undefined || cc['must-revalidate'] !== undefined,
      generation,
      checkedGeneration: generation,
      hitHeaders: null,
      hitHeadersAge: -1,
    };
  }

  private serveEntry(ctx: Ctx, entry: CachedObject, status: CacheStatus, now: number): void {
    const { vh, res } = ctx;
    const ageSec = Math.max(0, Math.floor((entry.correctedInitialAgeMs + now - entry.responseTimeMs) / 1000));
    // Conditional requests from the viewer are answered from the stored validators.
    const inm = vh.ifNoneMatch;
    const ims = vh.ifModifiedSince;
    if ((inm !== undefined || ims !== undefined) && (entry.status === 200 || entry.status === 203)) {
      let notModified = false;
      if (inm !== undefined) notModified = ifNoneMatchMatches(inm, entry.etag);
      else if (entry.lastModified !== undefined) {
        const lm = Date.parse(entry.lastModified);
        const since = Date.parse(ims!);
        notModified = Number.isFinite(lm) && Number.isFinite(since) && lm <= since;
      }
      if (notModified) {
        const out: string[] = [];
        for (const [k, v] of entry.headers) if (NOT_MODIFIED_FIELDS.has(k)) out.push(k, k === 'cache-control' && entry.browserCacheControl !== null ? entry.browserCacheControl : v);
        this.addCacheHeaders(out, entry, ageSec, status);
        res.writeHead(304, out);
        res.end();
        this.record(ctx, 304, status, 0, true, entry);
        return;
      }
    }
    const body = entry.body!;
    const range = vh.range;
    if (range !== undefined && entry.status === 200 && this.ifRangeAllows(vh, entry)) {
      const r = parseRange(range, body.length);
      if (r !== undefined) {
        const out = this.buildHeaders(entry, ageSec, status, true);
        if (r === null) {
          out.push('content-range', `bytes */${body.length}`, 'content-length', '0');
          res.writeHead(416, out);
          res.end();
          this.record(ctx, 416, status, 0, true, entry);
          return;
        }
        const [start, end] = r;
        out.push('content-range', `bytes ${start}-${end}/${body.length}`, 'content-length', String(end - start + 1));
        res.writeHead(206, out);
        if (ctx.method === 'HEAD') res.end();
        else res.end(body.subarray(start, end + 1));
        this.record(ctx, 206, status, ctx.method === 'HEAD' ? 0 : end - start + 1, true, entry);
        return;
      }
    }
    let headers: string[];
    if (status === 'HIT') {
      if (entry.hitHeadersAge !== ageSec || entry.hitHeaders === null) {
        entry.hitHeaders = this.buildHeaders(entry, ageSec, 'HIT', false);
        entry.hitHeadersAge = ageSec;
      }
      headers = entry.hitHeaders;
    } else {
      headers = this.buildHeaders(entry, ageSec, status, false);
    }
    res.writeHead(entry.status, headers);
    if (ctx.method === 'HEAD') {
      res.end();
      this.record(ctx, entry.status, status, 0, status !== 'MISS' && status !== 'EXPIRED', entry);
    } else {
      res.end(body);
      this.record(ctx, entry.status, status, body.length, status !== 'MISS' && status !== 'EXPIRED', entry);
    }
  }

  private ifRangeAllows(vh: ViewerHeaders, entry: CachedObject): boolean {
    const ifRange = vh.ifRange;
    if (ifRange === undefined) return true;
    const v = ifRange.trim();
    if (v.startsWith('"') || v.startsWith('W/')) return entry.etag !== undefined && !entry.etag.startsWith('W/') && v === entry.etag; // strong comparison
    return entry.lastModified !== undefined && v === entry.lastModified;
  }

  private buildHeaders(entry: CachedObject, ageSec: number, status: CacheStatus, forRange: boolean): string[] {
    const out: string[] = [];
    for (const [k, v] of entry.headers) {
      if (forRange && k === 'content-length') continue;
      if (k === 'cache-control' && entry.browserCacheControl !== null) continue;
      out.push(k, v);
    }
    if (entry.browserCacheControl !== null) out.push('cache-control', entry.browserCacheControl);
    if (!forRange && entry.status === 200) out.push('accept-ranges', 'bytes');
    this.addCacheHeaders(out, entry, ageSec, status);
    return out;
  }

  private addCacheHeaders(out: string[], entry: CachedObject, ageSec: number, status: CacheStatus): void {
    out.push('age', String(ageSec));
    if (status === 'HIT') {
      const ttl = Math.floor(entry.lifetimeMs / 1000) - ageSec;
      out.push('cache-status', `${this.cacheStatusValues.HIT}; ttl=${Math.max(0, ttl)}`);
    } else out.push('cache-status', this.cacheStatusValues[status]);
    if (entry.statusHeader) out.push('x-cache-status', status);
  }

  /** Forwards the request as is (bypass, unsafe methods, range pass-through) and streams the answer back. */
  private async forward(ctx: Ctx, status: CacheStatus, invalidateOnSuccess: boolean): Promise<void> {
    const { req, method } = ctx;
    const hasBody = method !== 'GET' && method !== 'HEAD' && (req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0'));
    let res: OriginResponse;
    try {
      res = await fetchOrigin(this.deps.pools, ctx.route.origin, { method, path: this.originPath(ctx), headers: this.originHeaders(ctx, false), body: hasBody ? req : null, onInfo: this.earlyHints(ctx) }, this.timing(ctx.route));
    } catch (err) {
      const e = err instanceof OriginError ? err : new OriginError('protocol', String(err));
      this.deps.logger.warn({ endpoint: ctx.endpoint.id, origin: ctx.route.origin.id, path: ctx.path, kind: e.kind, err: e.message }, 'origin fetch failed');
      if (!req.readableEnded) req.resume();
      this.sendError(ctx, e.status, originErrorBody(e), status);
      return;
    }
    if (invalidateOnSuccess && !UNSAFE_SAFE_METHODS.has(method) && res.statusCode >= 200 && res.statusCode < 400) this.invalidateAfterUnsafe(ctx, res);
    await this.streamResponse(ctx, res, res.body, status);
  }

  /** RFC 9111 4.4: a successful unsafe method invalidates the target URI and same-origin Location / Content-Location. */
  private invalidateAfterUnsafe(ctx: Ctx, res: OriginResponse): void {
    const store = this.deps.store;
    store.purgePath(ctx.endpoint.id, ctx.path);
    for (const name of ['location', 'content-location']) {
      const v = headerString(res.headers[name]);
      if (!v) continue;
      const u = URL.parse(v, `http://${ctx.host}${ctx.path}`);
      if (u && normalizeHost(u.host) === ctx.host) store.purgePath(ctx.endpoint.id, u.pathname);
    }
  }

  private async streamResponse(ctx: Ctx, r: OriginResponse, body: Readable, status: CacheStatus): Promise<void> {
    const { res } = ctx;
    const headers = passthroughHeaders(r.headers);
    headers.push('cache-status', this.cacheStatusValues[status]);
    if (ctx.rule === null || ctx.rule.cacheStatusHeader) headers.push('x-cache-status', status);
    let bytes = 0;
    try {
      res.writeHead(r.statusCode, headers);
      if (ctx.method === 'HEAD' || r.statusCode === 204 || r.statusCode === 304) {
        body.resume();
        res.end();
      } else {
        body.on('data', (c: Buffer) => { bytes += c.length; });
        await pipeline(body, res);
      }
    } catch (err) {
      this.deps.logger.debug({ endpoint: ctx.endpoint.id, path: ctx.path, err: (err as Error).message }, 'response stream ended early');
      if (!res.destroyed) res.destroy();
    }
    this.record(ctx, r.statusCode, status, bytes, false);
  }

  private originPath(ctx: Ctx): string {
    let path = ctx.path;
    const strip = ctx.route.stripPrefix;
    if (strip !== null && path.startsWith(strip) && (path.length === strip.length || path.charCodeAt(strip.length) === 47)) {
      path = path.slice(strip.length) || '/';
    }
    const prefix = ctx.route.origin.pathPrefix;
    if (prefix) path = prefix + path;
    return ctx.query ? path + '?' + ctx.query : path;
  }

  /** Request headers for the origin: hop-by-hop removed, Host per forward_host_header, X-Forwarded-*, custom headers. */
  private originHeaders(ctx: Ctx, forCache: boolean): Record<string, string | string[]> {
    const src = ctx.req.headers;
    const out: Record<string, string | string[]> = {};
    const extra = src.connection ? new Set(String(src.connection).toLowerCase().split(',').map((s) => s.trim())) : null;
    for (const name in src) {
      const v = src[name];
      if (v === undefined || HOP_BY_HOP.has(name) || name === 'host' || name === 'expect' || (extra !== null && extra.has(name))) continue;
      // A cache fill fetches the whole object unconditionally; the viewer's own conditions are answered from it.
      if (forCache && (name === 'range' || name === 'if-range' || name === 'if-none-match' || name === 'if-modified-since' || name === 'if-match' || name === 'if-unmodified-since')) continue;
      out[name] = v;
    }
    const origin = ctx.route.origin;
    out.host = origin.snapshot.forward_host_header ? (src.host ?? origin.hostHeader) : origin.hostHeader;
    const clientIp = ctx.req.socket.remoteAddress ?? '';
    const xff = headerString(src['x-forwarded-for']);
    out['x-forwarded-for'] = xff ? `${xff}, ${clientIp}` : clientIp;
    out['x-forwarded-proto'] = (ctx.req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    if (src.host !== undefined) out['x-forwarded-host'] = src.host;
    out.via = src.via ? `${headerString(src.via)}, 1.1 ${this.deps.options.cacheName}` : `1.1 ${this.deps.options.cacheName}`;
    for (const [k, v] of origin.customHeaders) out[k] = v;
    return out;
  }

  /**
   * Forwards an origin's 103 Early Hints (its Link fields) to the viewer waiting
   * on that fetch, before the final response. Other 1xx are not forwarded: 100
   * answers an Expect the agent never sends on (node:http answers the viewer's own
   * Expect: 100-continue), and 101 needs an upgrade the agent does not proxy.
   */
  private earlyHints(ctx: Ctx): (info: { statusCode: number; headers: Record<string, string | string[]> }) => void {
    return (info) => {
      const { req, res } = ctx;
      if (info.statusCode !== 103 || res.headersSent || res.destroyed || req.httpVersionMajor !== 1 || req.httpVersionMinor < 1) return;
      const link = info.headers.link;
      if (link === undefined || link.length === 0) return;
      try {
        res.writeEarlyHints({ link });
      } catch (err) {
        this.deps.logger.debug({ endpoint: ctx.endpoint.id, path: ctx.path, err: (err as Error).message }, 'early hints not forwarded');
      }
    };
  }

  private timing(route: CompiledRoute): ((ms: number, status: number) => void) | undefined {
    const h = this.deps.originLatency;
    if (h === null) return undefined;
    const origin = route.origin.id;
    return (ms, status) => h.observe({ origin, status_class: `${(status / 100) | 0}xx` }, ms / 1000);
  }

  private sendError(ctx: Ctx, code: number, message: string, status: CacheStatus): void {
    const res = ctx.res;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const headers = ['content-type', 'text/plain; charset=utf-8', 'content-length', String(Buffer.byteLength(message)), 'cache-control', 'no-store', 'cache-status', this.cacheStatusValues[status]];
    if (ctx.rule === null || ctx.rule.cacheStatusHeader) headers.push('x-cache-status', status);
    res.writeHead(code, headers);
    res.end(ctx.method === 'HEAD' ? undefined : message);
    this.record(ctx, code, status, 0, false);
  }

  private fail(ctx: Ctx, err: unknown): void {
    this.deps.logger.error({ endpoint: ctx.endpoint.id, path: ctx.path, err: (err as Error)?.message }, 'request failed');
    this.sendError(ctx, 500, 'Internal error\n', 'MISS');
  }

  private record(ctx: Ctx, code: number, status: CacheStatus, bytes: number, fromCache: boolean, entry: CachedObject | null = null): void {
    // A hit counts its URL through the entry's slot (entries of other paths, e.g. a collapsed Vary variant, use the map).
    const holder = entry !== null && entry.path === ctx.path ? entry : null;
    this.deps.traffic.record(ctx.endpoint.id, code, status, bytes, fromCache, performance.now() - ctx.t0, ctx.path, ctx.rule?.id ?? null, holder);
  }
}

function originErrorBody(e: OriginError): string {
  switch (e.kind) {
    case 'timeout': return 'Origin timed out\n';
    case 'ssrf_refused': return 'Origin address not allowed\n';
    case 'dns_failure': return 'Origin host could not be resolved\n';
    default: return 'Origin unreachable\n';
  }
}

function dateOf(h: Record<string, string | string[] | undefined>): number | null {
  const d = parseHttpDate(headerString(h.date));
  return d === null || Number.isNaN(d) ? null : d;
}

function setHeader(headers: [string, string][], name: string, value: string): void {
  const i = headers.findIndex(([k]) => k === name);
  if (i === -1) headers.push([name, value]);
  else headers[i] = [name, value];
}

function drainAndSend(req: IncomingMessage, res: ServerResponse, status: number, message: string): void {
  req.resume();
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(message), 'cache-control': 'no-store' });
  res.end(message);
}
