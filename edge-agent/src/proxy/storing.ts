// Storing and 304 updates (RFC 9111 §3 and §4.3.4): the cache fill fetches the
// whole object (conditionally when a stale copy has validators), decides
// whether a shared cache may keep the response, buffers it up to the object
// size limit and stores it, or merges a 304 into the stale copy.
import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import type { CacheStatus } from '../metrics/traffic.ts';
import {
  correctedInitialAgeMs, deltaSeconds, EMPTY_CC, freshnessLifetime, HEURISTIC_STATUSES, parseAge, parseCacheControl, parseHttpDate,
  parseTargetedCacheControl, SliceSource, UNDERSTOOD_STATUSES, type CachedObject, type CacheStore, type Directives,
} from '../cache/index.ts';
import { randomBytes } from 'node:crypto';
import type { RoutedExchange } from './exchange.ts';
import type { Forwarder } from './forward.ts';
import { headerString, parseCookies, parseVary, responseTags, storedHeaderPairs, varyValues } from './http-util.ts';
import { classifyOriginError, OriginError, type OriginResponse } from './origin-client.ts';
import { contentTypeMatches, type CompiledCacheRule } from './routing.ts';

/** Fields a 304 must not overwrite in the stored response (RFC 9111 3.2). */
const NOT_UPDATED_BY_304 = new Set(['content-length', 'content-encoding', 'content-range', 'transfer-encoding']);

/** What a fill is told by the collapser: when to give up, and how to say it will finish whatever happens. */
export interface FillControl {
  /** Aborted when nobody waits for the fill any more (the origin request is cancelled with it). */
  readonly signal: AbortSignal;
  /** The answer is being kept for the cache: worth finishing, even if every viewer leaves. */
  commit(): void;
}

/** What a cache fill ended with. */
export type FillResult =
  | { type: 'stored'; entry: CachedObject; status: CacheStatus }
  | { type: 'passthrough'; response: OriginResponse; body: Readable }
  /** A large object kept in slices: its head is stored; source is the body to read its slices from (null: none). */
  | { type: 'sliced'; entry: CachedObject; status: CacheStatus; source: SliceSource | null }
  | { type: 'error'; error: OriginError };

export interface FillerDeps {
  store: CacheStore;
  forwarder: Forwarder;
  maxObjectBytes: number;
  /** Objects larger than thresholdBytes (or than maxObjectBytes) are kept in slices of sliceBytes; null: never. */
  slicing: SliceSettings | null;
}

export interface SliceSettings {
  sliceBytes: number;
  thresholdBytes: number;
}

export class CacheFiller {
  private readonly deps: FillerDeps;

  constructor(deps: FillerDeps) {
    this.deps = deps;
  }

  /**
   * Fetches the full object for the cache (conditionally when a stale copy has
   * validators) and stores it if a shared cache may. viewerWaiting: the
   * exchange's viewer waits on this result (it may get the origin's 103 hints).
   * withoutCredentials: the fill is the edge's own request, not the viewer's
   * (the one after a range miss): it sends neither Authorization nor cookies
   * (but those a cache rule keys on), and the object is keyed by what was sent.
   */
  async fill(ex: RoutedExchange, primary: string, stale: CachedObject | null, viewerWaiting: boolean, withoutCredentials = false, control: FillControl | null = null): Promise<FillResult> {
    const store = this.deps.store;
    const forwarder = this.deps.forwarder;
    const generation = store.currentGeneration;
    const headers = forwarder.originHeaders(ex, true);
    const sent = withoutCredentials ? ownRequest(ex, headers) : ex.headers;
    // HEAD misses fetch with GET so the object can be stored and later GETs hit.
    const conditional = stale !== null && (stale.etag !== undefined || stale.lastModified !== undefined);
    if (conditional) {
      if (stale.etag !== undefined) headers['if-none-match'] = stale.etag;
      if (stale.lastModified !== undefined) headers['if-modified-since'] = stale.lastModified;
    }
    let res: OriginResponse;
    try {
      res = await forwarder.fetch(ex, { method: 'GET', headers, onInfo: viewerWaiting ? forwarder.earlyHints(ex) : undefined, signal: control?.signal });
    } catch (err) {
      return { type: 'error', error: err instanceof OriginError ? err : new OriginError('protocol', String(err)) };
    }
    const reqCC = ex.vh.cacheControl !== undefined ? parseCacheControl(ex.vh.cacheControl) : EMPTY_CC;
    if (res.statusCode === 304 && conditional) {
      control?.commit();
      await res.body.dump().catch(() => {});
      const updated = updateFrom304(stale, res, ex.rule, generation);
      if (reqCC['no-store'] === undefined) store.set(updated);
      return { type: 'stored', entry: updated, status: 'REVALIDATED' };
    }
    const decision = storability(ex, res, reqCC, false);
    if (decision === null) {
      // A stale object the origin no longer lets us keep must go (e.g. now no-store).
      if (stale !== null && res.statusCode < 500) store.delete(stale);
      return { type: 'passthrough', response: res, body: res.body };
    }
    return this.keep(ex, primary, res, decision, generation, sent, reqCC, stale !== null ? 'EXPIRED' : 'MISS', control, true);
  }

  /**
   * An origin's whole answer to a request for one slice (an origin that ignores Range): kept whole when a shared
   * cache may keep it and it fits the object limit, else passed through; never sliced (its slices could not be
   * fetched). generation: taken before the request was sent.
   */
  keepWhole(ex: RoutedExchange, primary: string, res: OriginResponse, generation: number): Promise<FillResult> {
    const reqCC = ex.vh.cacheControl !== undefined ? parseCacheControl(ex.vh.cacheControl) : EMPTY_CC;
    const decision = storability(ex, res, reqCC, false);
    if (decision === null) return Promise.resolve({ type: 'passthrough', response: res, body: res.body });
    return this.keep(ex, primary, res, decision, generation, withoutViewerCredentials(ex), reqCC, 'MISS');
  }

  /**
   * A POST's answer kept for later GETs of its URL (RFC 9110 §9.3.3, RFC 9111
   * §4.4's complement): explicit freshness and a Content-Location naming the
   * request's own URL (the caller checked that, and that the exchange carries
   * the GET cache rule). Passthrough when it may not be kept; the body is read
   * here either way. generation: taken after the POST's invalidation.
   */
  async keepPostAnswer(ex: RoutedExchange, primary: string, res: OriginResponse, generation: number): Promise<FillResult> {
    const reqCC = ex.vh.cacheControl !== undefined ? parseCacheControl(ex.vh.cacheControl) : EMPTY_CC;
    const decision = storability(ex, res, reqCC, true);
    if (decision === null) return { type: 'passthrough', response: res, body: res.body };
    return this.keep(ex, primary, res, decision, generation, ex.headers, reqCC, 'MISS');
  }

  /** Buffers a storable answer up to the object size limit and stores it; a body the origin cuts short is an origin error. */
  private async keep(ex: RoutedExchange, primary: string, res: OriginResponse, cc: Directives, generation: number, sent: IncomingHttpHeaders, reqCC: Directives, status: CacheStatus, control: FillControl | null = null, slices = false): Promise<FillResult> {
    const max = this.deps.maxObjectBytes;
    const declared = Number(headerString(res.headers['content-length']) ?? -1);
    const slicing = this.deps.slicing;
    if (slices && slicing !== null && res.statusCode === 200 && declared > Math.min(slicing.thresholdBytes, max) && reqCC['no-store'] === undefined) {
      // A large object: its head is kept now and its slices as the body is read (the viewer's answer reads it).
      const head = slicedHead(ex, primary, res, declared, slicing.sliceBytes, generation, sent);
      if (head !== null && this.deps.store.set(head)) {
        const body = res.body;
        return { type: 'sliced', entry: head, status, source: new SliceSource(body, slicing.sliceBytes, declared, () => void body.on('error', () => {}).destroy()) };
      }
    }
    if (declared > max) return { type: 'passthrough', response: res, body: res.body };
    // An object for the cache: finished even if every viewer waiting for it leaves (the next ones get it).
    if (reqCC['no-store'] === undefined) control?.commit();
    const chunks: Buffer[] = [];
    let total = 0;
    const iterator = res.body[Symbol.asyncIterator]();
    try {
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
    } catch (err) {
      // The origin closed or reset the connection mid-body: nothing is stored, and the viewer gets what
      // an origin failure gets (a stale copy where one may be served, else 502).
      const error = classifyOriginError(err);
      return { type: 'error', error: error instanceof OriginError ? error : new OriginError('protocol', error.message) };
    }
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total);
    const entry = makeEntry(ex, primary, res, cc, body, generation, sent);
    if (reqCC['no-store'] === undefined) this.deps.store.set(entry);
    return { type: 'stored', entry, status };
  }
}

/**
 * Makes the origin request's fields (headers) the edge's own request's: without the viewer's Authorization and
 * of its cookies only those the cache rule keys on. Returns the viewer's fields as sent (Vary values are read
 * from them).
 */
export function ownRequest(ex: RoutedExchange, headers: Record<string, string | string[]>): IncomingHttpHeaders {
  const sent = withoutViewerCredentials(ex);
  delete headers.authorization;
  if (sent.cookie === undefined) delete headers.cookie;
  else headers.cookie = sent.cookie;
  return sent;
}

/**
 * The viewer's fields without its credentials, for a fill that is the edge's
 * own request: no Authorization, and of its cookies only those the cache rule
 * keys on (the key holds them, so the origin must see them).
 */
export function withoutViewerCredentials(ex: RoutedExchange): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = { ...ex.headers };
  delete out.authorization;
  delete out.cookie;
  const keyed = ex.rule?.includeCookies;
  if (keyed !== undefined && keyed.length > 0) {
    const jar = parseCookies(ex.headers.cookie);
    const kept = keyed.filter((c) => jar.has(c)).map((c) => `${c}=${jar.get(c)}`);
    if (kept.length > 0) out.cookie = kept.join('; ');
  }
  return out;
}

/**
 * Directives governing storage, or null when the response must not be stored
 * (RFC 9111 §3 for a shared cache). explicitOnly: only with explicit freshness
 * (max-age, s-maxage, Expires), as a POST's answer needs.
 */
export function storability(ex: RoutedExchange, res: OriginResponse, reqCC: Directives, explicitOnly: boolean): Directives | null {
  const status = res.statusCode;
  if (status < 200 || status === 206 || status === 304) return null;
  if (reqCC['no-store'] !== undefined) return null;
  const h = res.headers;
  // CDN-Cache-Control (RFC 9213) targets us and, when it is a valid Structured Field Dictionary, replaces
  // Cache-Control for our decisions; an invalid one is ignored whole.
  const targeted = parseTargetedCacheControl(h['cdn-cache-control']);
  const cc = targeted ?? parseCacheControl(h['cache-control']);
  const ccDownstream = targeted !== null ? parseCacheControl(h['cache-control']) : cc;
  // must-understand (RFC 9111 §5.2.2.3): stored only by a cache that understands the status, and then no-store is ignored.
  const mustUnderstand = cc['must-understand'] !== undefined;
  if (mustUnderstand && !UNDERSTOOD_STATUSES.has(status)) return null;
  if ((cc['no-store'] !== undefined && !mustUnderstand) || cc.private !== undefined || ccDownstream.private !== undefined) return null;
  const vary = parseVary(h.vary);
  if (vary !== null && vary[0] === '*') return null; // Vary: * can never match a later request
  if (h['set-cookie'] !== undefined) return null; // never hand one viewer's cookie to another
  if (ex.vh.authorization !== undefined && cc.public === undefined && cc['s-maxage'] === undefined && cc['must-revalidate'] === undefined) return null;
  const explicit = cc['max-age'] !== undefined || cc['s-maxage'] !== undefined || h.expires !== undefined;
  if (explicitOnly && !explicit) return null;
  const rule = ex.rule !== null && contentTypeMatches(ex.rule, headerString(h['content-type'])) ? ex.rule : null;
  if (!explicit && cc.public === undefined && !HEURISTIC_STATUSES.has(status)) return null;
  const hasValidator = h.etag !== undefined || h['last-modified'] !== undefined;
  const f = freshnessLifetime({
    status, cc, dateMs: dateOf(h), expires: headerString(h.expires), lastModified: headerString(h['last-modified']), responseTimeMs: res.responseTimeMs,
    ruleTtlSeconds: ruleTtl(rule, status),
  });
  if (f.lifetimeMs <= 0 && !hasValidator) return null; // nothing to reuse it with
  return cc;
}

/** The rule's edge TTL for an answer of this status: its negative-caching TTL for errors (4xx, 5xx), its ttl_seconds otherwise; null without a rule. */
function ruleTtl(rule: CompiledCacheRule | null, status: number): number | null {
  if (rule === null) return null;
  return status >= 400 ? rule.negativeTtlSeconds : rule.ttlSeconds;
}

/**
 * The head of an object kept in slices, from the origin's 206 to a slice request (or its 200 with the whole
 * body): the object's headers (Content-Length its total, no Content-Range) and freshness, an empty body, and a
 * new version name for its slices. Null when a shared cache may not keep the answer, or when it has no
 * validator that tells two versions apart (a strong ETag, or Last-Modified): slices of different versions
 * would otherwise mix unnoticed.
 */
export function slicedHead(ex: RoutedExchange, primary: string, res: OriginResponse, total: number, sliceBytes: number, generation: number, sent: IncomingHttpHeaders): CachedObject | null {
  const whole: OriginResponse = { ...res, statusCode: 200 };
  const reqCC = ex.vh.cacheControl !== undefined ? parseCacheControl(ex.vh.cacheControl) : EMPTY_CC;
  const cc = storability(ex, whole, reqCC, false);
  if (cc === null) return null;
  const etag = headerString(res.headers.etag);
  if ((etag === undefined || etag.startsWith('W/')) && headerString(res.headers['last-modified']) === undefined) return null;
  const head = makeEntry(ex, primary, whole, cc, Buffer.alloc(0), generation, sent);
  head.headers = head.headers.filter(([k]) => k !== 'content-range');
  setHeader(head.headers, 'content-length', String(total));
  head.sliced = { total, sliceBytes, version: randomBytes(6).toString('base64url') };
  return head;
}

/** Whether an origin's answer is of the version of the object the head was made from (its validators match). */
export function sameVersion(head: CachedObject, res: OriginResponse): boolean {
  const etag = headerString(res.headers.etag);
  if (head.etag !== undefined && !head.etag.startsWith('W/')) return etag === head.etag;
  return head.lastModified !== undefined && headerString(res.headers['last-modified']) === head.lastModified && etag === head.etag;
}

/** The object stored for an answer; sent: the request fields the origin got (Vary values are read from them). */
function makeEntry(ex: RoutedExchange, primary: string, res: OriginResponse, cc: Directives, body: Buffer, generation: number, sent: IncomingHttpHeaders): CachedObject {
  const h = res.headers;
  const rule = ex.rule !== null && contentTypeMatches(ex.rule, headerString(h['content-type'])) ? ex.rule : null;
  const headers = storedHeaderPairs(h);
  setHeader(headers, 'content-length', String(body.length));
  const dateMs = dateOf(h);
  if (dateMs === null) setHeader(headers, 'date', new Date(res.responseTimeMs).toUTCString());
  const vary = parseVary(h.vary);
  const f = freshnessLifetime({
    status: res.statusCode, cc, dateMs, expires: headerString(h.expires), lastModified: headerString(h['last-modified']), responseTimeMs: res.responseTimeMs,
    ruleTtlSeconds: ruleTtl(rule, res.statusCode),
  });
  const swr = deltaSeconds(cc['stale-while-revalidate']) ?? rule?.staleWhileRevalidateSeconds ?? 0;
  const sie = deltaSeconds(cc['stale-if-error']) ?? rule?.staleIfErrorSeconds ?? 0;
  const varied = vary === null ? '' : varyValues(sent, vary);
  return {
    key: vary === null ? primary : primary + '\x01' + varied,
    primaryKey: primary,
    endpointId: ex.endpoint.id,
    path: ex.path,
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
    modifiedMs: modifiedMs(headerString(h['last-modified']), dateMs ?? res.responseTimeMs),
    varyNames: vary,
    varyValues: varied,
    authorizationAllowed: cc.public !== undefined || cc['s-maxage'] !== undefined || cc['must-revalidate'] !== undefined,
    generation,
    checkedGeneration: generation,
    cacheRuleId: rule?.id ?? null,
    browserCacheControl: rule !== null && rule.browserTtlSeconds !== null ? `public, max-age=${rule.browserTtlSeconds}` : null,
    statusHeader: ex.rule === null ? true : ex.rule.cacheStatusHeader,
    hitHeaders: null,
    hitHeadersAge: -1,
    urlSlot: null,
  };
}

/** RFC 9111 4.3.4: headers from the 304 replace the stored ones; freshness is recomputed from them. */
export function updateFrom304(stale: CachedObject, res: OriginResponse, rule: CompiledCacheRule | null, generation: number): CachedObject {
  const incoming = storedHeaderPairs(res.headers).filter(([k]) => !NOT_UPDATED_BY_304.has(k));
  const names = new Set(incoming.map(([k]) => k));
  const headers = stale.headers.filter(([k]) => !names.has(k)).concat(incoming);
  const get = (n: string) => {
    const vs = headers.filter(([k]) => k === n).map(([, v]) => v);
    return vs.length ? vs.join(', ') : undefined;
  };
  const cc = parseTargetedCacheControl(get('cdn-cache-control')) ?? parseCacheControl(get('cache-control'));
  const dateMs = parseHttpDate(get('date'));
  const date = dateMs === null || Number.isNaN(dateMs) ? null : dateMs;
  const activeRule = rule !== null && stale.cacheRuleId === rule.id ? rule : null;
  const f = freshnessLifetime({ status: stale.status, cc, dateMs: date, expires: get('expires'), lastModified: get('last-modified'), responseTimeMs: res.responseTimeMs, ruleTtlSeconds: ruleTtl(activeRule, stale.status) });
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
    modifiedMs: modifiedMs(get('last-modified'), date ?? res.responseTimeMs),
    authorizationAllowed: cc.public !== undefined || cc['s-maxage'] !== undefined || cc['must-revalidate'] !== undefined,
    generation,
    checkedGeneration: generation,
    hitHeaders: null,
    hitHeadersAge: -1,
  };
}

/**
 * What If-Modified-Since is compared with (RFC 9110 §13.1.3, RFC 9111 §4.3.2):
 * Last-Modified, or without it the Date (the time received when it had none);
 * null when Last-Modified is not a valid date (no 304 is made from it).
 */
function modifiedMs(lastModified: string | undefined, dateMs: number): number | null {
  if (lastModified === undefined) return dateMs;
  const lm = parseHttpDate(lastModified)!;
  return Number.isNaN(lm) ? null : lm;
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
