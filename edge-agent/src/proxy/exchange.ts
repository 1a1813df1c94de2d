// One viewer request and its answer as it moves through the request path, and
// the request normalisation that starts it (DESIGN.md §8): the Host and the
// request target are validated once, the path normalised once, Connection-listed
// fields dropped once, and everything after (endpoint lookup, policies, routing,
// cache rules, keys, Vary, forwarding) reads the normalised fields from here.
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Readable, Writable } from 'node:stream';
import { formatAuthority, parseAuthority, type Authority } from '../../../shared/src/match/authority.ts';
import { normalizePath } from '../../../shared/src/match/path.ts';
import { applyRequestEdits } from '../policy/headers.ts';
import type { Viewer } from '../policy/client-address.ts';
import type { PolicyDenial } from '../policy/index.ts';
import { connectionListedFields, endToEndHeaders, scanViewerHeaders, type HeaderSource, type ViewerHeaders } from './http-util.ts';
import type { CompiledCacheRule, CompiledEndpoint, CompiledRoute } from './routing.ts';

export class Exchange implements HeaderSource {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly t0: number;
  readonly method: string;
  /** The request fields the cache path reads, scanned from rawHeaders (req.headers stays lazy on hits). */
  readonly vh: ViewerHeaders;
  /** Normalised host name, no port: what endpoints and route host patterns match. */
  host = '';
  /** Normalised host plus the port when it is not the scheme's default: what is keyed and forwarded. */
  authority = '';
  /** Normalised path (percent-decoded unreserved characters, no dot segments). */
  path = '/';
  query = '';
  /** A prefix token the path carried as a segment, already taken out of `path` (signed-urls.ts takePathToken); null: none. */
  pathToken: { name: string; value: string | null } | null = null;
  /** The Cookie field to forward when a request policy changed it (the signed-URL check takes its token cookies out); null: as sent. */
  cookieEdit: { value: string | undefined } | null = null;
  /** Fields the viewer's Connection header lists (hop-by-hop for this request). */
  connectionListed: Set<string> | null = null;
  endpoint: CompiledEndpoint | null = null;
  route: CompiledRoute | null = null;
  rule: CompiledCacheRule | null = null;
  /** Why a request policy refused the request (access record and metrics). */
  denial: PolicyDenial | null = null;
  /** The viewer (address and scheme) once something resolved it (Proxy.viewerOf: request policies, IPv6, HSTS, countries); undefined: not yet. */
  viewer: Viewer | undefined = undefined;
  /** A shield hop: the node id of the agent that sent it (its viewer's policies were applied there); null: a viewer's request. */
  shieldHop: string | null = null;
  /** How many times the request already passed through this CDN (our CDN-Loop entries, loop.ts). */
  loopVisits = 0;
  /** The shield node this agent asked instead of the origin (null: none). */
  viaShield: string | null = null;
  /** Time to the origin's response head when the origin was asked (access record). */

  originMs: number | null = null;
  private endToEnd: IncomingHttpHeaders | null = null;

  constructor(req: IncomingMessage, res: ServerResponse, t0: number) {
    this.req = req;
    this.res = res;
    this.t0 = t0;
    this.method = req.method ?? 'GET';
    this.vh = scanViewerHeaders(req.rawHeaders);
    if (req.httpVersionMajor === 2) adoptAuthority(this.vh, req);
  }

  /**
   * The viewer's end-to-end header fields as they go to the origin: with the
   * route's request header policy applied (custom and removed request
   * headers), so the cache key, Vary and bypass checks read what is forwarded.
   * Built (and req.headers materialised) only when something reads them, which
   * is after routing.
   */
  get headers(): IncomingHttpHeaders {
    if (this.endToEnd === null) {
      this.endToEnd = endToEndHeaders(this.req.headers, this.connectionListed, this.authority);
      if (this.cookieEdit !== null) {
        if (this.cookieEdit.value === undefined) delete this.endToEnd.cookie;
        else this.endToEnd.cookie = this.cookieEdit.value;
      }
      const edits = this.route === null ? null : this.route.shaping.headers?.request;
      if (edits) applyRequestEdits(edits, this.endToEnd);
    }
    return this.endToEnd;
  }
}

/**
 * HTTP/2 names the authority in the :authority pseudo-header (RFC 9113 §8.3.1); a Host field beside it must
 * name the same, or the request is malformed (counted as two Host fields: 400).
 */
function adoptAuthority(vh: ViewerHeaders, req: IncomingMessage): void {
  const authority = req.headers[':authority'];
  if (typeof authority !== 'string') return;
  if (vh.host !== undefined && vh.host !== authority) vh.hostCount = 2;
  else {
    vh.host = authority;
    vh.hostCount = 1;
  }
}

/** Whether the viewer's request has a body to forward: HTTP/1.1 says so in its framing fields, HTTP/2 by not ending the stream with its headers. */
export function requestHasBody(req: IncomingMessage): boolean {
  if (req.httpVersionMajor === 2) return (req as unknown as { stream: { endAfterHeaders: boolean } }).stream.endAfterHeaders !== true;
  const h = req.headers;
  return h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0');
}

/**
 * The viewer's request body as a stream: the request itself over HTTP/1.1, its stream over HTTP/2 (the request
 * object of the core stream API is no stream itself: tls/http2-server.ts).
 */
export function viewerBody(req: IncomingMessage): Readable {
  return req.httpVersionMajor === 2 ? (req as unknown as { stream: Readable }).stream : req;
}

/** Where a streamed answer's body goes: the response over HTTP/1.1, the HTTP/2 stream (after writeHead) over HTTP/2. */
export function viewerSink(ex: Exchange): Writable {
  return ex.req.httpVersionMajor === 2 ? (ex.res as unknown as { stream: Writable }).stream : ex.res;
}

/** An exchange past routing: endpoint and route are known. */
export interface RoutedExchange extends Exchange {
  endpoint: CompiledEndpoint;
  route: CompiledRoute;
}

const ABSOLUTE_FORM = /^https?:\/\//i;

/**
 * The request normalisation step: validates the Host field (exactly one, a
 * well-formed authority), takes the authority from an absolute-form target
 * instead of Host (RFC 9112 §3.2.2), normalises the path, and clears the
 * Connection-listed fields from the scanned viewer headers. Fills the exchange
 * and returns null, or returns the reason for a 400.
 */
export function normalizeRequest(ex: Exchange): string | null {
  const vh = ex.vh;
  if (vh.hostCount > 1) return 'More than one Host header field\n';
  let authority: Authority | null = vh.host === undefined ? null : parseAuthority(vh.host);
  if (authority === null && vh.host !== undefined) return 'Malformed Host header field\n';
  let defaultPort = (ex.req.socket as { encrypted?: boolean }).encrypted ? 443 : 80;
  const url = ex.req.url ?? '/';
  let target = url;
  if (url.charCodeAt(0) !== 47 /* / */) {
    if (!ABSOLUTE_FORM.test(url)) return 'Bad request target\n';
    const start = url.indexOf('//') + 2;
    let end = start;
    while (end < url.length) {
      const c = url.charCodeAt(end);
      if (c === 47 /* / */ || c === 63 /* ? */ || c === 35 /* # */) break;
      end++;
    }
    authority = parseAuthority(url.slice(start, end));
    if (authority === null || authority.host === '') return 'Malformed authority in the request target\n';
    defaultPort = url.charCodeAt(4) === 58 /* : */ ? 80 : 443;
    target = url.charCodeAt(end) === 47 ? url.slice(end) : '/' + url.slice(end);
  }
  if (authority !== null) {
    ex.host = authority.host;
    ex.authority = formatAuthority(authority, defaultPort);
  }
  const q = target.indexOf('?');
  const raw = q === -1 ? target : target.slice(0, q);
  const path = normalizePath(raw);
  if (path === null) {
    ex.path = raw; // recorded as asked (the request goes no further)
    return 'Bad request path\n';
  }
  ex.path = path;
  if (q !== -1) {
    if (target.indexOf('#', q) !== -1) return 'Bad request target\n'; // a fragment is never part of a request target
    ex.query = target.slice(q + 1);
  }
  if (vh.connection !== undefined) {
    const listed = connectionListedFields(vh.connection);
    if (listed !== null) {
      ex.connectionListed = listed;
      for (const name of listed) vh.clear(name);
    }
  }
  return null;
}
