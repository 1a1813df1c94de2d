// The single exit of the request path: every answer (cache hits, 304/206/416
// from cache, origin responses streamed through, early refusals such as
// 400/421/403, origin errors 502/504, request timeouts 408) leaves through
// Exit.send, which runs the endpoint's response policies (shaping.ts: custom
// error page, compression of a streamed answer, header policy, then the
// generic hooks), writes the head and body, and makes the access record and
// the traffic metrics.
import type { Logger } from 'pino';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { accessRecord } from './access-record.ts';
import { parseClientAddress } from '../policy/client-address.ts';
import type { LogDrains } from '../logs/drains.ts';
import type { CacheStatus, TrafficCounters } from '../metrics/traffic.ts';
import type { PolicyResponse } from '../policy/index.ts';
import type { CachedObject } from '../cache/index.ts';
import { requestHasBody, viewerSink, type Exchange } from './exchange.ts';
import { tagFields } from './http-util.ts';
import type { ResponseShaper } from './shaping.ts';

export type AnswerBody = Buffer | string | Readable | null;

/** Recorded for an exchange whose viewer closed the connection before it was answered (nginx's convention). */
export const CLIENT_CLOSED_REQUEST = 499;

const CACHE_STATUS_DETAIL: Record<CacheStatus, string> = {
  HIT: 'hit',
  MISS: 'fwd=miss',
  EXPIRED: 'fwd=stale',
  STALE: 'hit; detail=stale-if-error',
  BYPASS: 'fwd=bypass',
  REVALIDATED: 'fwd=stale; fwd-status=304',
  UPDATING: 'hit; detail=stale-while-revalidate',
};

/** The viewer of an exchange as the request policies see it (the socket's peer, or the trusted proxy's header). */
export interface ViewerLookup {
  /** Its address in canonical text (IPv4-mapped IPv6 as IPv4), '' when unknown. */
  address(ex: Exchange): string;
  country(ex: Exchange): string | null;
  /** Whether it used HTTPS (top URLs carry the scheme it used). */
  secure(ex: Exchange): boolean;
}

/** Without request policies: the socket's peer, canonical. */
const NO_VIEWER: ViewerLookup = { address: (ex) => parseClientAddress(ex.req.socket.remoteAddress ?? '')?.text ?? '', country: () => null, secure: () => true };

export class Exit {
  private readonly traffic: TrafficCounters;
  private readonly logger: Logger;
  /** Cache-Status values (RFC 9211) per cache status, with this agent's cache name. */
  readonly cacheStatusValues: Record<CacheStatus, string>;
  /** The response policies' work (error pages, compression, header policies). */
  readonly shaper: ResponseShaper;
  /** The log drains that receive access records (null: none at all). */
  private readonly logs: LogDrains | null;
  /** Who the viewer is (access records): the same resolution the request policies use. */
  private readonly viewer: ViewerLookup;

  constructor(traffic: TrafficCounters, logger: Logger, cacheName: string, shaper: ResponseShaper, logs: LogDrains | null = null, viewer: ViewerLookup = NO_VIEWER) {
    this.traffic = traffic;
    this.logger = logger;
    this.shaper = shaper;
    this.logs = logs;
    this.viewer = viewer;
    this.cacheStatusValues = Object.fromEntries(Object.entries(CACHE_STATUS_DETAIL).map(([k, v]) => [k, `${cacheName}; ${v}`])) as Record<CacheStatus, string>;
  }

  /**
   * Answers the exchange. headers is a flat [name, value, ...] list with
   * lower-case names (it may be a cached object's shared list: it is copied
   * before a response policy may edit it). A HEAD request, 204 and 304 get no
   * body. Returns a promise only for a stream body or while a custom error
   * page is fetched (settled when it is done).
   */
  send(ex: Exchange, status: number, headers: string[], body: AnswerBody, cacheStatus: CacheStatus, fromCache = false, entry: CachedObject | null = null): void | Promise<void> {
    const res = ex.res;
    if (res.headersSent) {
      // A second answer after the first head went out (a failure mid-response): all that is left is to cut it.
      dispose(body);
      res.destroy();
      return;
    }
    const pages = ex.endpoint === null || ex.shieldHop !== null ? null : ex.endpoint.responsePolicies.errorPages;
    const rule = pages === null ? undefined : pages.get(status);
    if (rule !== undefined && !res.destroyed) {
      const answer = { status, headers, body };
      const page = this.shaper.pages.page(ex.endpoint!, rule);
      if (page instanceof Promise) {
        return page.then((p) => {
          const a = this.shaper.withPage(answer, rule, p);
          if (a.body !== body) dispose(body);
          return this.deliver(ex, a.status, a.headers, a.body, cacheStatus, fromCache, entry);
        });
      }
      const a = this.shaper.withPage(answer, rule, page);
      if (a.body !== body) dispose(body);
      ({ status, headers, body } = a);
    }
    return this.deliver(ex, status, headers, body, cacheStatus, fromCache, entry);
  }

  /** send's second half: the response policies past the error page, then the head and body. */
  private deliver(ex: Exchange, status: number, headers: string[], body: AnswerBody, cacheStatus: CacheStatus, fromCache: boolean, entry: CachedObject | null): void | Promise<void> {
    const res = ex.res;
    if (res.destroyed) {
      dispose(body);
      this.abandoned(ex, cacheStatus);
      return;
    }
    const endpoint = ex.endpoint;
    // A hop's answer from cache carries the object's tags, so the agent that asked can purge its copy by them.
    if (ex.shieldHop !== null && entry !== null && entry.tags.length > 0) headers = headers.concat(tagFields(entry.tags));
    // A shield hop's answer is shaped by the agent that asked (it serves it to its viewer), not here.
    if (endpoint !== null && ex.shieldHop === null) {
      const shaping = (ex.route ?? endpoint.defaultRoute).shaping;
      if (body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
        const encoded = this.shaper.encoded(ex, shaping, status, headers, body);
        if (encoded !== null) ({ headers, body } = encoded);
      }
      headers = this.shaper.head(ex, shaping, status, headers, entry);
      const hooks = endpoint.responsePolicies.hooks;
      if (hooks.length > 0) {
        const p: PolicyResponse = { req: ex.req, endpoint, host: ex.host, path: ex.path, query: ex.query, cacheStatus, status, headers: headers.slice(), body };
        for (const hook of hooks) hook(p);
        if (p.body !== body) dispose(body);
        status = p.status;
        headers = p.headers;
        body = p.body;
      }
    }
    const noBody = ex.method === 'HEAD' || status === 204 || status === 304;
    if (body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) return this.pipe(ex, status, headers, body, cacheStatus, noBody, fromCache, entry);
    try {
      res.writeHead(status, headers);
    } catch (err) {
      // Only a header value node:http refuses can land here (an origin's, passed through).
      this.logger.warn({ endpoint: ex.endpoint?.id, path: ex.path, err: (err as Error).message }, 'response head refused');
      res.destroy();
      this.record(ex, status, cacheStatus, 0, fromCache, entry);
      return;
    }
    if (noBody || body === null) {
      res.end();
      this.record(ex, status, cacheStatus, 0, fromCache, entry);
    } else {
      res.end(body);
      this.record(ex, status, cacheStatus, typeof body === 'string' ? Buffer.byteLength(body) : body.length, fromCache, entry);
    }
  }

  /**
   * A plain-text answer the agent makes itself (refusals, origin errors): never
   * stored by anyone. A request body still arriving is drained, and the
   * connection closed after the answer when the body was not complete.
   */
  refuse(ex: Exchange, status: number, message: string, cacheStatus: CacheStatus = 'BYPASS'): void {
    const headers = ['content-type', 'text/plain; charset=utf-8', 'content-length', String(Buffer.byteLength(message)), 'cache-control', 'no-store'];
    // A rule with cache_status_header false hides both fields (the node's region with them).
    if (ex.rule === null || ex.rule.cacheStatusHeader) headers.push('cache-status', this.cacheStatusValues[cacheStatus], 'x-cache-status', cacheStatus);
    const req = ex.req;
    if (!req.readableEnded && requestHasBody(req)) {
      // HTTP/1.1 closes a connection whose request body was not read to its end; an HTTP/2 stream ends alone.
      if (!req.complete && req.httpVersionMajor === 1) headers.push('connection', 'close');
      req.resume();
    }
    void this.send(ex, status, headers, message, cacheStatus);
  }

  /** The viewer closed the connection before it was answered: recorded (499), nothing written. */
  abandoned(ex: Exchange, cacheStatus: CacheStatus): void {
    if (!ex.res.destroyed) ex.res.destroy();
    this.record(ex, CLIENT_CLOSED_REQUEST, cacheStatus, 0, false, null);
  }

  private async pipe(ex: Exchange, status: number, headers: string[], body: Readable, cacheStatus: CacheStatus, noBody: boolean, fromCache: boolean, entry: CachedObject | null): Promise<void> {
    const res = ex.res;
    let bytes = 0;
    try {
      res.writeHead(status, headers);
      if (noBody) {
        body.resume();
        res.end();
      } else {
        body.on('data', (c: Buffer) => { bytes += c.length; });
        await pipeline(body, viewerSink(ex));
      }
    } catch (err) {
      this.logger.debug({ endpoint: ex.endpoint?.id, path: ex.path, err: (err as Error).message }, 'response stream ended early');
      dispose(body);
      if (!res.destroyed) res.destroy();
    }
    this.record(ex, status, cacheStatus, bytes, fromCache, entry);
  }

  /** The access record and the traffic metrics of one answer. */
  private record(ex: Exchange, code: number, status: CacheStatus, bytes: number, fromCache: boolean, entry: CachedObject | null): void {
    const ms = performance.now() - ex.t0;
    const endpoint = ex.endpoint;
    if (endpoint === null) this.traffic.recordUnrouted(code, status, ms);
    else {
      const country = this.viewer.country(ex);
      // A shield hop's viewer was counted by the agent that asked: here it is shield traffic, never viewer traffic.
      if (ex.shieldHop !== null) this.traffic.recordShieldHop(endpoint.id, code, status, bytes);
      else {
        // A hit counts its URL through the entry's slot (entries of other paths, e.g. a collapsed Vary variant, use the map).
        const holder = entry !== null && entry.path === ex.path ? entry : null;
        this.traffic.record(endpoint.id, code, status, bytes, fromCache, ms, ex.path, ex.rule === null ? null : ex.rule.id, holder, ex.route === null ? null : ex.route.origin.id, country, this.viewer.secure(ex));
      }
      const logs = this.logs;
      if (logs !== null) {
        // The access record is made only for an endpoint some drain receives.
        const drains = logs.forEndpoint(endpoint.id);
        if (drains.length !== 0) logs.record(accessRecord(ex, this.viewer.address(ex), code, status, bytes, ms, logs.nodeName, country, logs.needsFor(drains)), drains);
      }
    }
    if (this.logger.isLevelEnabled('debug')) {
      this.logger.debug({
        endpoint: endpoint?.id ?? null, method: ex.method, host: ex.authority, path: ex.path, query: ex.query, status: code,
        cache_status: status, bytes, ms: Math.round(ms * 1000) / 1000, client_ip: this.viewer.address(ex),
        ...(ex.denial === null ? {} : { denied_by: ex.denial.policy, denial_reason: ex.denial.reason }),
      }, 'access');
    }
  }
}

/** Drops a body that will not be sent (an undici body errors when destroyed unread: that error is expected). */
export function dispose(body: AnswerBody): void {
  if (body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) body.on('error', noop).destroy();
}

function noop(): void {}
