// Forwarding: the origin request built from the normalised exchange (path with
// strip_prefix and path_prefix, the viewer's end-to-end fields, Host and
// X-Forwarded-Host exactly as keyed), forwarding a request as is (bypass,
// unsafe methods, range pass-through) and streaming the origin's answer back,
// 103 Early Hints, and RFC 9111 §4.4 invalidation after unsafe methods.
import { STATUS_CODES, validateHeaderName, validateHeaderValue, type ServerResponse } from 'node:http';
import type { Histogram } from 'prom-client';
import type { Logger } from 'pino';
import type { Readable } from 'node:stream';
import { normalizeHost } from '../../../shared/src/match/host.ts';
import { normalizePath } from '../../../shared/src/match/path.ts';
import type { CacheStatus } from '../metrics/traffic.ts';
import type { CacheStore } from '../cache/index.ts';
import { requestHasBody, viewerBody, type RoutedExchange } from './exchange.ts';
import type { Exit } from './exit.ts';
import { applyRequestEdits } from '../policy/headers.ts';
import { connectionListedFields, headerString, HOP_BY_HOP, passthroughHeaders } from './http-util.ts';
import { fetchOrigin, OriginError, ViewerBodyTimeoutError, type OriginPools, type OriginRequest, type OriginResponse } from './origin-client.ts';
import { withLoopEntry } from './loop.ts';
import { SHIELD_HEADER, ShieldSilentError, type ShieldDirectory, type ShieldNode } from './shield-directory.ts';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
/**
 * Viewer fields never forwarded: answered by the agent (Expect) or set by it (Host). The forwarding and
 * override fields (Forwarded, X-Forwarded-Host, X-Real-IP...) never reach the exchange's fields at all.
 */
const NOT_FORWARDED = new Set(['host', 'expect']);
/** A cache fill fetches the whole object unconditionally; the viewer's own conditions are answered from it. */
const CONDITIONAL_FIELDS = new Set(['range', 'if-range', 'if-none-match', 'if-modified-since', 'if-match', 'if-unmodified-since']);

/** A Location-like field's URL when it is on the request's host (relative ones are): its normalised path and its query. */
function sameHostUrl(ex: RoutedExchange, value: string | undefined): { path: string; query: string } | null {
  if (!value) return null;
  const u = URL.parse(value, `http://${ex.authority || 'origin.invalid'}${ex.path}`);
  if (u === null || normalizeHost(u.host) !== ex.host) return null;
  return { path: normalizePath(u.pathname) ?? u.pathname, query: u.search.slice(1) };
}

/** A token (RFC 9110 §5.6.2): a Forwarded value that needs no quotes (an authority with a port does). */
const TOKEN = /^[!#$%&'*+\-.^_\x60|~0-9A-Za-z]+$/;

/**
 * The agent's own Forwarded field (RFC 7239): one element with the address that
 * connected to it, the scheme it was asked on, and the host only when the
 * cache key holds it. The viewer's own Forwarded is never passed on.
 */
export function forwardedElement(clientIp: string, proto: string, keyedAuthority: string | null): string {
  let out = clientIp === '' ? 'for=unknown' : `for=${forwardedNode(clientIp)}`;
  out += `;proto=${proto}`;
  if (keyedAuthority !== null) out += ';host=' + (TOKEN.test(keyedAuthority) ? keyedAuthority : '"' + keyedAuthority + '"');
  return out;
}

/** A node of RFC 7239 §6: IPv4 as is, IPv6 bracketed and quoted (v4-mapped addresses as IPv4). */
function forwardedNode(ip: string): string {
  if (ip.startsWith('::ffff:') && ip.includes('.')) return ip.slice(7);
  return ip.includes(':') ? `"[${ip}]"` : ip;
}

/**
 * Writes a 1xx head on the viewer's connection ahead of the final response.
 * node:http's writeEarlyHints sends a 103 only with a Link field and
 * writeProcessing a 102 without fields; both are built on the response's
 * _writeRaw (which queues behind an earlier pipelined response), used here the
 * same way after node's own name and value checks. Throws on a field node
 * would refuse: the interim response is then not forwarded.
 */
function writeInterim(res: ServerResponse, status: number, headers: Record<string, string | string[]>): void {
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Interim Response'}\r\n`;
  const listed = connectionListedFields(headerString(headers.connection));
  for (const name in headers) {
    if (HOP_BY_HOP.has(name) || (listed !== null && listed.has(name))) continue;
    const value = headers[name];
    for (const v of Array.isArray(value) ? value : [value]) {
      validateHeaderName(name);
      validateHeaderValue(name, v);
      head += `${name}: ${v}\r\n`;
    }
  }
  (res as unknown as { _writeRaw(data: string, encoding: BufferEncoding): boolean })._writeRaw(head + '\r\n', 'latin1');
}

/** The same over HTTP/2: an informational HEADERS frame on the response's stream (RFC 9113 §8.1). */
function writeInterimHttp2(res: ServerResponse, status: number, headers: Record<string, string | string[]>): void {
  const listed = connectionListedFields(headerString(headers.connection));
  const fields: Record<string, string | string[] | number> = { ':status': status };
  for (const name in headers) if (!HOP_BY_HOP.has(name) && (listed === null || !listed.has(name))) fields[name] = headers[name]!;
  (res as unknown as { stream: { additionalHeaders(h: Record<string, string | string[] | number>): void } }).stream.additionalHeaders(fields);
}

/** Origin shield (shield-directory.ts): the map, keys and connections to shield nodes. */
export interface ShieldDeps {
  directory: ShieldDirectory;
  pools: OriginPools;
}

/** Fields of an origin request that are the edge's or the origin's own, not the viewer's: the shield sets its own. */
const NOT_FOR_SHIELD = ['x-forwarded-host', 'forwarded', 'x-forwarded-proto'];

/** Why a shield is unreachable (the edge then asks the origin itself): it refused, reset or closed, could not be resolved, or did not accept the connection in time. */
function shieldUnreachable(err: unknown): boolean {
  if (!(err instanceof OriginError)) return false;
  if (err.kind === 'connect_failure' || err.kind === 'dns_failure' || err.kind === 'ssrf_refused') return true;
  return err.kind === 'timeout' && (err.cause as { code?: string } | undefined)?.code === 'UND_ERR_CONNECT_TIMEOUT';
}

export interface ForwarderDeps {
  /** Origin shield: misses of endpoints shielded in another region go to a shield node of it (null: none). */
  shield: ShieldDeps | null;
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

  /**
   * One origin request for the exchange (typed errors: OriginError, ViewerBodyTimeoutError, or the signal's reason).
   * A GET or HEAD of an endpoint shielded in another region goes to a shield node of that region instead.
   */
  fetch(ex: RoutedExchange, request: Omit<OriginRequest, 'path'>): Promise<OriginResponse> {
    const shield = this.deps.shield;
    if (shield !== null && ex.shieldHop === null && (request.method === 'GET' || request.method === 'HEAD') && request.body == null) {
      const node = shield.directory.target(ex.endpoint.snapshot.shield_region, `${ex.endpoint.id}\x1f${ex.path}?${ex.query}`);
      if (node !== null) return this.viaShield(ex, request, shield, node);
    }
    return this.fromOrigin(ex, request);
  }

  private fromOrigin(ex: RoutedExchange, request: Omit<OriginRequest, 'path'>): Promise<OriginResponse> {
    return fetchOrigin(this.deps.pools, ex.route.origin, { ...request, path: this.originPath(ex), bodyIdleTimeoutMs: this.deps.bodyIdleTimeoutMs }, this.timing(ex));
  }

  /**
   * The request as a viewer's to the shield node (the keyed authority as Host, the path and query the edge keyed, the
   * viewer's fields and the fill's conditionals, never the origin's own custom headers), marked with a signed hop
   * header. A shield that cannot be reached, or answers neither the hop nor a liveness probe (ShieldDirectory.watch),
   * sends the edge to the origin itself and is passed over for a while.
   */
  private async viaShield(ex: RoutedExchange, request: Omit<OriginRequest, 'path'>, shield: ShieldDeps, node: ShieldNode): Promise<OriginResponse> {
    const target = ex.query ? `${ex.path}?${ex.query}` : ex.path;
    const host = ex.authority !== '' ? ex.authority : ex.endpoint.snapshot.hostname;
    const headers = { ...request.headers };
    for (const [name] of ex.route.origin.customHeaders) delete headers[name];
    for (const name of NOT_FOR_SHIELD) delete headers[name];
    headers.host = host;
    headers[SHIELD_HEADER] = shield.directory.hopHeader(request.method, host, target);
    const watch = shield.directory.watch(node, request.signal);
    try {
      // No longer than the origin itself may take: the shield waits that long for it.
      const res = await fetchOrigin(shield.pools, node.origin, { ...request, path: target, headers, signal: watch.signal, timeoutMs: ex.route.origin.snapshot.timeout_ms }, this.timing(ex));
      watch.answered();
      ex.viaShield = node.nodeId;
      return res;
    } catch (err) {
      watch.answered();
      if (!(err instanceof ShieldSilentError) && !shieldUnreachable(err)) throw err;
      shield.directory.markDown(node.nodeId);
      this.deps.logger.warn({ endpoint: ex.endpoint.id, shield: node.nodeId, address: node.address, err: (err as Error).message }, 'shield unreachable; asking the origin');
      return this.fromOrigin(ex, request);
    }
  }

  /**
   * Forwards the request as is (bypass, unsafe methods, range pass-through) and
   * streams the answer back. answered: given the origin's answer after the
   * invalidation, answers the viewer itself and resolves true (a POST's answer
   * kept for later GETs), or resolves false without touching it.
   */
  async forward(ex: RoutedExchange, status: CacheStatus, invalidateOnSuccess: boolean, answered?: (answer: OriginResponse) => Promise<boolean>): Promise<void> {
    const { req, res, method } = ex;
    const hasBody = method !== 'GET' && method !== 'HEAD' && requestHasBody(req);
    // Nobody else waits on this fetch: a viewer who leaves takes it down, wherever it is (queued, uploading, waiting).
    const gone = new AbortController();
    // writableEnded, not writableFinished: HTTP/2's compatibility response says "finished" when its stream is reset.
    const onClose = () => { if (!res.writableEnded) gone.abort(new Error('the viewer closed the connection')); };
    res.once('close', onClose);
    let answer: OriginResponse;
    try {
      answer = await this.fetch(ex, { method, headers: this.originHeaders(ex, false), body: hasBody ? viewerBody(req) : null, onInfo: this.earlyHints(ex), signal: gone.signal });
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
    if (answered !== undefined && await answered(answer)) return;
    await this.stream(ex, answer, answer.body, status);
  }

  /** An origin answer streamed to the viewer unchanged, hop-by-hop fields (and, but for a hop, the purge tags) removed, Cache-Status added. */
  stream(ex: RoutedExchange, r: OriginResponse, body: Readable | Buffer, status: CacheStatus): Promise<void> | void {
    const headers = passthroughHeaders(r.headers, ex.shieldHop !== null);
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
      const u = sameHostUrl(ex, headerString(res.headers[name]));
      if (u !== null) store.purgePath(ex.endpoint.id, u.path);
    }
  }

  /**
   * Whether the origin's Content-Location names the request's own URL (same
   * host, path once normalised, and query as sent): then a POST's answer with
   * explicit freshness may be kept for later GETs of it (RFC 9110 §9.3.3).
   */
  contentLocationIsTarget(ex: RoutedExchange, res: OriginResponse): boolean {
    const u = sameHostUrl(ex, headerString(res.headers['content-location']));
    return u !== null && u.path === ex.path && u.query === ex.query;
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
   * custom headers, then CDN-Loop. The viewer's authority reaches the origin (Host and
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
    const proto = (ex.req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    out['x-forwarded-proto'] = proto;
    out.forwarded = forwardedElement(clientIp, proto, keyedAuthority);
    out.via = src.via ? `${headerString(src.via)}, 1.1 ${this.deps.cacheName}` : `1.1 ${this.deps.cacheName}`;
    const edits = ex.route.shaping.headers?.request;
    if (edits) applyRequestEdits(edits, out);
    for (const [k, v] of origin.customHeaders) out[k] = v;
    // Last, from the viewer's own field: no header policy or origin setting may drop the entries (RFC 8586 §2).
    out['cdn-loop'] = withLoopEntry(ex.vh.cdnLoop);
    return out;
  }

  /**
   * Forwards an origin's interim responses (102 Processing, 103 Early Hints and
   * any other 1xx but 100 and 101) with all their fields but hop-by-hop ones to
   * the viewer waiting on that fetch, before the final response (RFC 9110 §15.2:
   * a proxy forwards the 1xx it did not ask for), over HTTP/1.1 and HTTP/2. Never to HTTP/1.0 viewers,
   * never kept: a later request, a collapsed follower or a cache hit gets none.
   * 100 answers an Expect the agent never sends on (node:http answers the
   * viewer's own), and 101 needs an upgrade the agent does not proxy; undici
   * does not pass either here.
   */
  earlyHints(ex: RoutedExchange): (info: { statusCode: number; headers: Record<string, string | string[]> }) => void {
    return (info) => {
      const { req, res } = ex;
      const status = info.statusCode;
      if (status < 102 || status > 199 || res.headersSent || res.destroyed || (req.httpVersionMajor === 1 && req.httpVersionMinor < 1)) return;
      try {
        if (req.httpVersionMajor === 2) writeInterimHttp2(res, status, info.headers);
        else writeInterim(res, status, info.headers);
      } catch (err) {
        this.deps.logger.debug({ endpoint: ex.endpoint.id, path: ex.path, status, err: (err as Error).message }, 'interim response not forwarded');
      }
    };
  }

  /** The origin's time to its response head: the origin latency histogram, and the exchange's access record. */
  private timing(ex: RoutedExchange): (ms: number, status: number) => void {
    const h = this.deps.originLatency;
    const origin = ex.route.origin.id;
    return (ms, status) => {
      ex.originMs = ms;
      h?.observe({ origin, status_class: `${(status / 100) | 0}xx` }, ms / 1000);
    };
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
