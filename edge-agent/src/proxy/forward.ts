// Forwarding: the origin request built from the normalised exchange (path with
// strip_prefix and path_prefix, the viewer's end-to-end fields, Host and
// X-Forwarded-Host exactly as keyed), forwarding a request as is (bypass,
// unsafe methods, range pass-through) and streaming the origin's answer back,
// 103 Early Hints, and RFC 9111 §4.4 invalidation after unsafe methods.
import type { Histogram } from 'prom-client';
import type { Logger } from 'pino';
import type { Readable } from 'node:stream';
import { normalizeHost } from '../../../shared/src/match/host.ts';
import { normalizePath } from '../../../shared/src/match/path.ts';
import type { CacheStatus } from '../metrics/traffic.ts';
import type { CacheStore } from './cache-store.ts';
import type { RoutedExchange } from './exchange.ts';
import type { Exit } from './exit.ts';
import { applyRequestEdits } from '../policy/headers.ts';
import { headerString, passthroughHeaders } from './http-util.ts';
import { fetchOrigin, OriginError, ViewerBodyTimeoutError, type OriginPools, type OriginRequest, type OriginResponse } from './origin-client.ts';
import type { CompiledRoute } from './routing.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
/** Viewer fields never forwarded: answered by the agent (Expect) or set by it (forwarding fields about the host). */
const NOT_FORWARDED = new Set(['host', 'expect', 'x-forwarded-host']);
/** A cache fill fetches the whole object unconditionally; the viewer's own conditions are answered from it. */
const CONDITIONAL_FIELDS = new Set(['range', 'if-range', 'if-none-match', 'if-modified-since', 'if-match', 'if-unmodified-since']);

export interface ForwarderDeps {
  pools: OriginPools;
  store: CacheStore;
  exit: Exit;
  logger: Logger;
  originLatency: Histogram<'origin' | 'status_class'> | null;
  /** The Via pseudonym and Cache-Status name of this agent. */
  cacheName: string;
  /** Longest pause allowed between chunks of a viewer's body being forwarded (0: none). */
  bodyIdleTimeoutMs: number;
}

export class Forwarder {
  private readonly deps: ForwarderDeps;

  constructor(deps: ForwarderDeps) {
    this.deps = deps;
  }

  /** One origin request for the exchange (typed errors: OriginError, ViewerBodyTimeoutError, or the signal's reason). */
  fetch(ex: RoutedExchange, request: Omit<OriginRequest, 'path'>): Promise<OriginResponse> {
    return fetchOrigin(this.deps.pools, ex.route.origin, { ...request, path: this.originPath(ex), bodyIdleTimeoutMs: this.deps.bodyIdleTimeoutMs }, this.timing(ex.route));
  }

  /** Forwards the request as is (bypass, unsafe methods, range pass-through) and streams the answer back. */
  async forward(ex: RoutedExchange, status: CacheStatus, invalidateOnSuccess: boolean): Promise<void> {
    const { req, res, method } = ex;
    const h = req.headers;
    const hasBody = method !== 'GET' && method !== 'HEAD' && (h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0'));
    // Nobody else waits on this fetch: a viewer who leaves takes it down, wherever it is (queued, uploading, waiting).
    const gone = new AbortController();
    const onClose = () => { if (!res.writableFinished) gone.abort(new Error('the viewer closed the connection')); };
    res.once('close', onClose);
    let answer: OriginResponse;
    try {
      answer = await this.fetch(ex, { method, headers: this.originHeaders(ex, false), body: hasBody ? req : null, onInfo: this.earlyHints(ex), signal: gone.signal });
    } catch (err) {
      res.off('close', onClose);
      if (err instanceof ViewerBodyTimeoutError) {
        this.deps.exit.refuse(ex, 408, 'The request body stopped arriving\n', status);
        return;
      }
      if (gone.signal.aborted) {
        this.deps.exit.abandoned(ex, status);
        return;
      }
      const e = err instanceof OriginError ? err : new OriginError('protocol', String(err));
      this.logFailure(ex, e);
      this.deps.exit.refuse(ex, e.status, originErrorBody(e), status);
      return;
    }
    res.off('close', onClose);
    if (invalidateOnSuccess && !SAFE_METHODS.has(method) && answer.statusCode >= 200 && answer.statusCode < 400) this.invalidateAfterUnsafe(ex, answer);
    await this.stream(ex, answer, answer.body, status);
  }

  /** An origin answer streamed to the viewer unchanged, hop-by-hop fields removed, Cache-Status added. */
  stream(ex: RoutedExchange, r: OriginResponse, body: Readable, status: CacheStatus): Promise<void> | void {
    const headers = passthroughHeaders(r.headers);
    // A rule with cache_status_header false hides both fields (the node's region with them).
    if (ex.rule === null || ex.rule.cacheStatusHeader) headers.push('cache-status', this.deps.exit.cacheStatusValues[status], 'x-cache-status', status);
    return this.deps.exit.send(ex, r.statusCode, headers, body, status);
  }

  logFailure(ex: RoutedExchange, e: OriginError): void {
    this.deps.logger.warn({ endpoint: ex.endpoint.id, origin: ex.route.origin.id, path: ex.path, kind: e.kind, err: e.message }, 'origin fetch failed');
  }

  /** RFC 9111 4.4: a successful unsafe method invalidates the target URI and same-origin Location / Content-Location. */
  private invalidateAfterUnsafe(ex: RoutedExchange, res: OriginResponse): void {
    const store = this.deps.store;
    store.purgePath(ex.endpoint.id, ex.path);
    for (const name of ['location', 'content-location']) {
      const v = headerString(res.headers[name]);
      if (!v) continue;
      const u = URL.parse(v, `http://${ex.authority || 'origin.invalid'}${ex.path}`);
      if (u && normalizeHost(u.host) === ex.host) store.purgePath(ex.endpoint.id, normalizePath(u.pathname) ?? u.pathname);
    }
  }

  /** The origin's path: the normalised path, strip_prefix removed, path_prefix added, the query as the viewer sent it. */
  originPath(ex: RoutedExchange): string {
    let path = ex.path;
    const strip = ex.route.stripPrefix;
    if (strip !== null && path.startsWith(strip) && (path.length === strip.length || path.charCodeAt(strip.length) === 47)) {
      path = path.slice(strip.length) || '/';
    }
    const prefix = ex.route.origin.pathPrefix;
    if (prefix) path = prefix + path;
    return ex.query ? path + '?' + ex.query : path;
  }

  /**
   * Request fields for the origin: the viewer's end-to-end fields (hop-by-hop
   * and Connection-listed ones already gone, the route's request header policy
   * applied), Host per forward_host_header, X-Forwarded-*, the policy again
   * (so it may also remove or set the fields the edge adds), the origin's
   * custom headers. The viewer's authority reaches the origin (Host and
   * X-Forwarded-Host) exactly when the cache key holds it.
   */
  originHeaders(ex: RoutedExchange, forCache: boolean): Record<string, string | string[]> {
    const src = ex.headers;
    const out: Record<string, string | string[]> = {};
    for (const name in src) {
      const v = src[name];
      if (v === undefined || NOT_FORWARDED.has(name) || (forCache && CONDITIONAL_FIELDS.has(name))) continue;
      out[name] = v;
    }
    const origin = ex.route.origin;
    const keyedAuthority = origin.snapshot.forward_host_header && ex.authority !== '' ? ex.authority : null;
    out.host = keyedAuthority ?? origin.hostHeader;
    if (keyedAuthority !== null) out['x-forwarded-host'] = keyedAuthority;
    const clientIp = ex.req.socket.remoteAddress ?? '';
    const xff = headerString(src['x-forwarded-for']);
    out['x-forwarded-for'] = xff ? `${xff}, ${clientIp}` : clientIp;
    out['x-forwarded-proto'] = (ex.req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    out.via = src.via ? `${headerString(src.via)}, 1.1 ${this.deps.cacheName}` : `1.1 ${this.deps.cacheName}`;
    const edits = ex.route.shaping.headers?.request;
    if (edits) applyRequestEdits(edits, out);
    for (const [k, v] of origin.customHeaders) out[k] = v;
    return out;
  }

  /**
   * Forwards an origin's 103 Early Hints (its Link fields) to the viewer waiting
   * on that fetch, before the final response. Other 1xx are not forwarded: 100
   * answers an Expect the agent never sends on (node:http answers the viewer's own
   * Expect: 100-continue), and 101 needs an upgrade the agent does not proxy.
   */
  earlyHints(ex: RoutedExchange): (info: { statusCode: number; headers: Record<string, string | string[]> }) => void {
    return (info) => {
      const { req, res } = ex;
      if (info.statusCode !== 103 || res.headersSent || res.destroyed || req.httpVersionMajor !== 1 || req.httpVersionMinor < 1) return;
      const link = info.headers.link;
      if (link === undefined || link.length === 0) return;
      try {
        res.writeEarlyHints({ link });
      } catch (err) {
        this.deps.logger.debug({ endpoint: ex.endpoint.id, path: ex.path, err: (err as Error).message }, 'early hints not forwarded');
      }
    };
  }

  private timing(route: CompiledRoute): ((ms: number, status: number) => void) | undefined {
    const h = this.deps.originLatency;
    if (h === null) return undefined;
    const origin = route.origin.id;
    return (ms, status) => h.observe({ origin, status_class: `${(status / 100) | 0}xx` }, ms / 1000);
  }
}

export function originErrorBody(e: OriginError): string {
  switch (e.kind) {
    case 'timeout': return 'Origin timed out\n';
    case 'ssrf_refused': return 'Origin address not allowed\n';
    case 'dns_failure': return 'Origin host could not be resolved\n';
    default: return 'Origin unreachable\n';
  }
}
