// Small HTTP helpers of the request path: hop-by-hop filtering, cache keys,
// Vary, ranges. Kept free of I/O so they are easy to test and cheap to call.
import type { IncomingHttpHeaders } from 'node:http';
import type { CompiledCacheRule, CompiledEndpoint, CompiledRoute } from './routing.ts';

/** Hop-by-hop fields (RFC 9110 7.6.1) and fields a cache must not forward or store. */
export const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'proxy-authenticate', 'proxy-authorization', 'http2-settings',
]);

/**
 * Fields never stored with a cached object: recomputed (age) or meant for this
 * cache alone. X-Cache-Status is this agent's own short field: an upstream's
 * (a shield's) is dropped, while its Cache-Status entry is kept, so the
 * viewer's Cache-Status lists the shield's entry before this agent's (RFC 9211). CDN-Cache-Control is kept and passed on (RFC 9213 allows it;
 * a CDN in front of this one obeys it too, browsers ignore it).
 */
const NOT_STORED = new Set(['age', 'surrogate-control', 'cache-tag', 'surrogate-key', 'x-cache-status']);

/**
 * Viewer fields that tell an origin where or how a request arrived, or which
 * URL or method to act on instead: the agent writes Forwarded, X-Forwarded-Proto
 * and (when the host is keyed) X-Forwarded-Host itself, and drops the others, so
 * nothing a viewer sends there reaches the origin unkeyed. An operator may still
 * send any of them to the origin with a custom request header (policy or origin).
 * They are gone from the exchange's fields, so cache keys, Vary and bypass
 * checks never read them either.
 */
export const VIEWER_OVERRIDE_FIELDS = new Set([
  'forwarded', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip',
  'x-original-host', 'x-original-url', 'x-rewrite-url', 'x-http-method-override',
  // The scheme as frameworks read it (Rack, Django, Spring, IIS): the agent's X-Forwarded-Proto is the only one.
  'x-forwarded-scheme', 'x-forwarded-ssl', 'front-end-https', 'x-url-scheme', 'x-forwarded-protocol',
  // Method and URL overrides other than the above.
  'x-http-method', 'x-method-override', 'x-original-method', 'x-forwarded-uri', 'x-forwarded-path', 'x-envoy-original-path',
  // Host and client claims: the agent's X-Forwarded-Host / Forwarded / X-Forwarded-For say who and where.
  'x-host', 'x-forwarded-server', 'true-client-ip',
  // A shield hop's mark (shield-directory.ts): read by a shield before this, never passed on.
  'x-edge-shield',
]);

type HeaderBag = Record<string, string | string[] | undefined>;

function connectionTokens(headers: HeaderBag): Set<string> | null {
  const c = headers.connection;
  if (c === undefined) return null;
  const text = Array.isArray(c) ? c.join(',') : c;
  const out = new Set<string>();
  for (const t of text.split(',')) {
    const n = t.trim().toLowerCase();
    if (n && n !== 'close' && n !== 'keep-alive') out.add(n);
  }
  return out.size ? out : null;
}

/** Response headers to keep with a stored object (lower-case names, one pair per value). */
export function storedHeaderPairs(headers: HeaderBag): [string, string][] {
  const extra = connectionTokens(headers);
  const out: [string, string][] = [];
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined || HOP_BY_HOP.has(name) || NOT_STORED.has(name) || (extra !== null && extra.has(name))) continue;
    if (Array.isArray(v)) for (const x of v) out.push([name, x]);
    else out.push([name, v]);
  }
  return out;
}

/** The purge tags of an answer (Cache-Tag, Surrogate-Key): the CDN's business, never a viewer's. */
const TAG_FIELDS = new Set(['cache-tag', 'surrogate-key']);

/**
 * Response headers to pass through to the viewer unchanged (hop-by-hop removed, Surrogate-Control dropped, the
 * purge tags dropped unless the answer goes to another agent: a shield hop's, which indexes them).
 */
export function passthroughHeaders(headers: HeaderBag, forAgent = false): string[] {
  const extra = connectionTokens(headers);
  const out: string[] = [];
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined || HOP_BY_HOP.has(name) || name === 'surrogate-control' || name === 'x-cache-status' || (extra !== null && extra.has(name))) continue;
    if (!forAgent && TAG_FIELDS.has(name)) continue;
    if (Array.isArray(v)) for (const x of v) out.push(name, x);
    else out.push(name, v);
  }
  return out;
}

export function headerString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}

export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!header) return out;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    const name = part.slice(0, eq).trim();
    if (name && !out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

function queryNames(query: string): string[] {
  if (!query) return [];
  return query.split('&').map((p) => {
    const eq = p.indexOf('=');
    return decodeQueryName(eq === -1 ? p : p.slice(0, eq));
  });
}

function decodeQueryName(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return s;
  }
}

/** True when a rule's bypass conditions hold for the request. */
export function bypassMatches(headers: IncomingHttpHeaders, rule: CompiledCacheRule, query: string): boolean {
  for (const h of rule.bypassHeaders) if (headers[h] !== undefined) return true;
  if (rule.bypassCookies.length) {
    const cookies = parseCookies(headers.cookie);
    for (const c of rule.bypassCookies) if (cookies.has(c)) return true;
  }
  if (rule.bypassQuery.length && query) {
    const names = new Set(queryNames(query));
    for (const q of rule.bypassQuery) if (names.has(q)) return true;
  }
  return false;
}

/** Query string kept in the key under a rule: include list wins over exclude list; pairs sorted so order does not split the cache. */
function keyQuery(query: string, rule: CompiledCacheRule | null): string {
  if (!query || rule === null || (rule.includeQuery === null && rule.excludeQuery === null)) return query;
  const kept: string[] = [];
  for (const pair of query.split('&')) {
    if (!pair) continue;
    const eq = pair.indexOf('=');
    const name = decodeQueryName(eq === -1 ? pair : pair.slice(0, eq));
    if (rule.includeQuery !== null ? rule.includeQuery.has(name) : !rule.excludeQuery!.has(name)) kept.push(pair);
  }
  return kept.sort().join('&');
}

/** The request's end-to-end header fields (hop-by-hop and Connection-listed ones removed), built only when read. */
export interface HeaderSource {
  readonly headers: IncomingHttpHeaders;
}

/**
 * Primary cache key: endpoint, route, (viewer authority when it is forwarded to
 * the origin, since the origin may answer per host), path, query as the rule
 * keys it, and the rule's extra header/cookie parts. Fields are joined by \x1f,
 * which cannot appear in a request target or header value. The request's
 * headers are read only for a rule with key headers or cookies.
 */
export function primaryCacheKey(endpoint: CompiledEndpoint, route: CompiledRoute, authority: string, path: string, query: string, rule: CompiledCacheRule | null, src: HeaderSource): string {
  const hostPart = route.origin.snapshot.forward_host_header ? authority : '';
  const q = keyQuery(query, rule);
  let key = endpoint.id + '\x1f' + route.id + '\x1f' + hostPart + '\x1f' + path + (q ? '?' + q : '');
  if (rule !== null && (rule.includeHeaders.length || rule.includeCookies.length)) {
    const headers = src.headers;
    for (const h of rule.includeHeaders) key += '\x1fh:' + h + '=' + (headerString(headers[h]) ?? '');
    if (rule.includeCookies.length) {
      const cookies = parseCookies(headers.cookie);
      for (const c of rule.includeCookies) key += '\x1fc:' + c + '=' + (cookies.get(c) ?? '');
    }
  }
  return key;
}

/** Lower-case names listed in Vary; ['*'] for Vary: *; null when absent. */
export function parseVary(v: string | string[] | undefined): string[] | null {
  if (v === undefined) return null;
  const text = Array.isArray(v) ? v.join(',') : v;
  const names = new Set<string>();
  for (const raw of text.split(',')) {
    const n = raw.trim().toLowerCase();
    if (n) names.add(n);
  }
  if (names.has('*')) return ['*'];
  return names.size ? [...names].sort() : null;
}

/**
 * Secondary key: the request's values of the Vary fields, normalised for
 * whitespace; Accept-Encoding and Accept-Language by their meaning (see
 * preferenceList), so `gzip, br` and `br;q=1.0,GZIP` select one variant.
 */
export function varyValues(headers: IncomingHttpHeaders, names: string[]): string {
  let out = '';
  for (const n of names) {
    const v = headerString(headers[n]);
    let value: string;
    if (v === undefined) value = '\x00';
    else if (n === 'accept-encoding' || n === 'accept-language') value = preferenceList(v);
    else value = v.replace(/\s*,\s*/g, ',').trim();
    out += n + ':' + value + '\x1e';
  }
  return out;
}

/** Normalised Accept-Encoding / Accept-Language values, by field value as sent (bounded; cleared when full). */
const preferenceMemo = new Map<string, string>();
const PREFERENCE_MEMO_LIMIT = 1024;
const PREFERENCE_MEMBER = /^([A-Za-z0-9*!#$%&'+.^_`|~-]+)(?:[ \t]*;[ \t]*q=(0(?:\.\d{0,3})?|1(?:\.0{0,3})?))?$/i;

/**
 * An Accept-Encoding or Accept-Language value as what it means (RFC 9110
 * §12.4.2, §12.5.3, §12.5.4): members lower-cased, q-values as numbers (absent
 * = 1, `0.50` = `0.5`), sorted by q-value then name, whitespace gone, so order,
 * case and spelling no longer split the cache. A member that is not
 * `token[;q=qvalue]` keeps its text (lower-cased), so malformed values still
 * select only themselves. Memoised per value: a hit on a varying object parses
 * nothing new for a value seen before.
 */
export function preferenceList(value: string): string {
  const known = preferenceMemo.get(value);
  if (known !== undefined) return known;
  const members: { name: string; q: number }[] = [];
  for (const raw of value.split(',')) {
    const text = raw.trim();
    if (text === '') continue;
    const m = PREFERENCE_MEMBER.exec(text);
    if (m === null) members.push({ name: text.toLowerCase().replace(/\s+/g, ''), q: -1 });
    else members.push({ name: m[1].toLowerCase(), q: m[2] === undefined ? 1 : Number(m[2]) });
  }
  members.sort((a, b) => b.q - a.q || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const out = members.map((m) => (m.q === 1 ? m.name : m.q === -1 ? m.name : `${m.name};q=${m.q}`)).join(',');
  if (preferenceMemo.size >= PREFERENCE_MEMO_LIMIT) preferenceMemo.clear();
  preferenceMemo.set(value, out);
  return out;
}

/** Parses a single byte range. undefined: ignore the header (serve 200); null: unsatisfiable (416). */
export function parseRange(header: string, size: number): [number, number] | null | undefined {
  if (!header.startsWith('bytes=')) return undefined;
  const spec = header.slice(6).trim();
  if (spec.includes(',')) return undefined; // multiple ranges: a full 200 is a valid answer
  const m = /^(\d*)-(\d*)$/.exec(spec);
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0 || size === 0) return null;
    return [Math.max(0, size - n), size - 1];
  }
  const start = Number(m[1]);
  if (m[2] !== '' && Number(m[2]) < start) return undefined;
  if (start >= size) return null;
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  return [start, end];
}

/**
 * A stored object's tags as fields responseTags reads back the same (a shield's answer to a hop): in Cache-Tag,
 * but those holding a comma (only Surrogate-Key can give one, and never with a space) in Surrogate-Key.
 */
export function tagFields(tags: readonly string[]): string[] {
  const out: string[] = [];
  const listed = tags.filter((t) => !t.includes(','));
  const keys = tags.filter((t) => t.includes(','));
  if (listed.length > 0) out.push('cache-tag', listed.join(', '));
  if (keys.length > 0) out.push('surrogate-key', keys.join(' '));
  return out;
}

/** Tags from Cache-Tag (comma-separated) and Surrogate-Key (space-separated). */
export function responseTags(headers: HeaderBag): string[] {
  const out = new Set<string>();
  const ct = headerString(headers['cache-tag']);
  if (ct) for (const t of ct.split(',')) if (t.trim()) out.add(t.trim());
  const sk = headerString(headers['surrogate-key']);
  if (sk) for (const t of sk.split(/\s+/)) if (t) out.add(t);
  return [...out];
}

/**
 * The few request fields the cache path reads, taken straight from
 * req.rawHeaders so a cache hit never materialises req.headers. Duplicates are
 * combined as node:http does: first wins for host, authorization, origin and
 * if-modified-since, cookies join with "; ", the rest with ", ". hostCount
 * counts Host field lines (more than one is refused), connection is the
 * Connection field (its listed fields are cleared by the request normalisation).
 */
export class ViewerHeaders {
  host: string | undefined = undefined;
  hostCount = 0;
  connection: string | undefined = undefined;
  range: string | undefined = undefined;
  ifRange: string | undefined = undefined;
  ifNoneMatch: string | undefined = undefined;
  ifModifiedSince: string | undefined = undefined;
  cacheControl: string | undefined = undefined;
  pragma: string | undefined = undefined;
  authorization: string | undefined = undefined;
  cookie: string | undefined = undefined;
  /** For compression (the coding an encoded variant is chosen by) and CORS (the origin echoed). */
  acceptEncoding: string | undefined = undefined;
  origin: string | undefined = undefined;
  /** CDN-Loop (RFC 8586: counted even when Connection lists it, loop.ts) and the shield hop mark (read by a shield). */
  cdnLoop: string | undefined = undefined;
  shieldHop: string | undefined = undefined;

  /** Forgets a field the viewer listed in Connection (it is hop-by-hop: neither forwarded nor used). */
  clear(name: string): void {
    switch (name) {
      case 'range': this.range = undefined; break;
      case 'if-range': this.ifRange = undefined; break;
      case 'if-none-match': this.ifNoneMatch = undefined; break;
      case 'if-modified-since': this.ifModifiedSince = undefined; break;
      case 'cache-control': this.cacheControl = undefined; break;
      case 'pragma': this.pragma = undefined; break;
      case 'authorization': this.authorization = undefined; break;
      case 'cookie': this.cookie = undefined; break;
      case 'accept-encoding': this.acceptEncoding = undefined; break;
      case 'origin': this.origin = undefined; break;
    }
  }
}

const join = (prev: string | undefined, v: string) => (prev === undefined ? v : prev + ', ' + v);

export function scanViewerHeaders(raw: string[]): ViewerHeaders {
  const h = new ViewerHeaders();
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    const len = name.length;
    // Only names of a length we care about are lower-cased and compared.
    if (len !== 4 && len !== 5 && len !== 6 && len !== 8 && len !== 10 && len !== 13 && len !== 15 && len !== 17) continue;
    if (len === 10 && (name.charCodeAt(0) | 0x20) !== 99 /* c: only Connection, not User-Agent */) continue;
    if (len === 15 && (name.charCodeAt(7) | 0x20) !== 101 /* e: only Accept-Encoding, not Accept-Language */) continue;
    const v = raw[i + 1];
    switch (name.toLowerCase()) {
      case 'host': if (h.hostCount++ === 0) h.host = v; break;
      case 'connection': h.connection = join(h.connection, v); break;
      case 'range': h.range = join(h.range, v); break;
      case 'if-range': h.ifRange = join(h.ifRange, v); break;
      case 'if-none-match': h.ifNoneMatch = join(h.ifNoneMatch, v); break;
      case 'if-modified-since': if (h.ifModifiedSince === undefined) h.ifModifiedSince = v; break;
      case 'cache-control': h.cacheControl = join(h.cacheControl, v); break;
      case 'pragma': h.pragma = join(h.pragma, v); break;
      case 'authorization': if (h.authorization === undefined) h.authorization = v; break;
      case 'cookie': h.cookie = h.cookie === undefined ? v : h.cookie + '; ' + v; break;
      case 'accept-encoding': h.acceptEncoding = join(h.acceptEncoding, v); break;
      case 'origin': if (h.origin === undefined) h.origin = v; break;
      case 'cdn-loop': h.cdnLoop = join(h.cdnLoop, v); break;
      case 'x-edge-shield': h.shieldHop = v; break;
    }
  }
  return h;
}

/**
 * Field names a Connection header lists (RFC 9110 §7.6.1), lower-cased;
 * "close" and "keep-alive" are connection options, not fields to remove
 * (Keep-Alive is hop-by-hop anyway). null when none.
 */
export function connectionListedFields(value: string | undefined): Set<string> | null {
  if (value === undefined) return null;
  let out: Set<string> | null = null;
  for (const t of value.split(',')) {
    const n = t.trim().toLowerCase();
    if (n && n !== 'close' && n !== 'keep-alive') (out ??= new Set()).add(n);
  }
  return out;
}

/**
 * The end-to-end header fields of a viewer request: hop-by-hop fields, the
 * fields its Connection header lists and the forwarding and override fields
 * (VIEWER_OVERRIDE_FIELDS) removed, Host replaced by the normalised authority
 * (absent when there is none).
 */
export function endToEndHeaders(src: IncomingHttpHeaders, listed: Set<string> | null, authority: string): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const name in src) {
    // HTTP/2's pseudo-header fields (:method, :path, :authority, :scheme) are not fields of the request.
    if (HOP_BY_HOP.has(name) || name === 'host' || name.charCodeAt(0) === 58 || VIEWER_OVERRIDE_FIELDS.has(name) || (listed !== null && listed.has(name))) continue;
    out[name] = src[name];
  }
  if (authority !== '') out.host = authority;
  return out;
}
