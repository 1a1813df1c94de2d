// Compiles a configuration snapshot into the tables the request path reads:
// host → endpoint, routes and cache rules pre-sorted with compiled matchers.
// Built once per applyConfig and swapped atomically; nothing here runs per request
// except the small match functions.
import type { CacheRuleSnapshot, ConfigSnapshot, EndpointSnapshot, OriginSnapshot, RouteSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compilePathGlobs, type PathMatcher } from '../../../shared/src/match/glob.ts';
import { compileHostPatterns, normalizeHost, type HostMatcher } from '../../../shared/src/match/host.ts';
import type { CompiledHeaderPolicy } from '../policy/headers.ts';
import type { RequestPolicy } from '../policy/index.ts';
import { compileRequestPolicies } from '../policy/request-policies.ts';
import { pathTokenNames } from '../policy/signed-urls.ts';
import { compileHeaderPolicies, compileResponsePolicies, type ResponsePolicies, type RouteShaping } from '../policy/response-shaping.ts';

export interface CompiledOrigin {
  id: string;
  snapshot: OriginSnapshot;
  /** scheme://host:port, the undici origin. */
  url: string;
  /** Host header value when the viewer's Host is not forwarded. */
  hostHeader: string;
  pathPrefix: string;
  retryOn: Set<string>;
  /** Stable fingerprint of the connection settings: a pool is reused across snapshots while it is unchanged. */
  poolKey: string;
  customHeaders: [string, string][];
}

export interface CompiledRoute {
  id: string;
  priority: number;
  matchHost: HostMatcher;
  matchPath: PathMatcher;
  methods: Set<string> | null;
  origin: CompiledOrigin;
  stripPrefix: string | null;
  snapshot: RouteSnapshot | null;
  /** Its header policy and compression (the route's own settings winning over the endpoint's). */
  shaping: RouteShaping;
}

export interface CompiledCacheRule {
  id: string;
  priority: number;
  matchPath: PathMatcher;
  methods: Set<string> | null;
  /** Lower-case content-type prefixes; empty = any. Checked on the response. */
  contentTypes: string[];
  ttlSeconds: number;
  browserTtlSeconds: number | null;
  includeHeaders: string[];
  includeQuery: Set<string> | null;
  excludeQuery: Set<string> | null;
  includeCookies: string[];
  bypassCookies: string[];
  bypassHeaders: string[];
  bypassQuery: string[];
  hasBypass: boolean;
  /** Whether the key needs more than path + query. */
  keyNeedsExtras: boolean;
  staleWhileRevalidateSeconds: number | null;
  staleIfErrorSeconds: number | null;
  /** Edge TTL of error answers without explicit freshness, instead of ttlSeconds (0: not cached). */
  negativeTtlSeconds: number;
  cacheStatusHeader: boolean;
}

export interface CompiledEndpoint {
  id: string;
  enabled: boolean;
  snapshot: EndpointSnapshot;
  origins: Map<string, CompiledOrigin>;
  routes: CompiledRoute[];
  defaultRoute: CompiledRoute;
  cacheRules: CompiledCacheRule[];
  hostnames: string[];
  /** Run between endpoint lookup and route match; may answer the request. */
  requestPolicies: RequestPolicy[];
  /** The token_params a path segment may carry a prefix token under (empty: token authentication off). */
  pathTokenNames: string[];
  /** Run on every answer of the endpoint, in the proxy's exit. */
  responsePolicies: ResponsePolicies;
}

export interface RoutingTable {
  version: number;
  byHost: Map<string, CompiledEndpoint>;
  byId: Map<string, CompiledEndpoint>;
  origins: Map<string, CompiledOrigin>;
}

const ALL_METHODS = null;

function methodSet(methods: readonly string[]): Set<string> | null {
  return methods.length === 0 ? ALL_METHODS : new Set(methods.map((m) => m.toUpperCase()));
}

function compileOrigin(o: OriginSnapshot): CompiledOrigin {
  const port = o.port ?? (o.scheme === 'https' ? 443 : 80);
  const defaultPort = (o.scheme === 'https' && port === 443) || (o.scheme === 'http' && port === 80);
  const host = o.host.includes(':') && !o.host.startsWith('[') ? `[${o.host}]` : o.host;
  const prefix = o.path_prefix.replace(/\/+$/, '');
  return {
    id: o.id,
    snapshot: o,
    url: `${o.scheme}://${host}:${port}`,
    hostHeader: defaultPort ? host : `${host}:${port}`,
    pathPrefix: prefix === '' ? '' : prefix.startsWith('/') ? prefix : `/${prefix}`,
    retryOn: new Set(o.retry_on),
    poolKey: JSON.stringify([o.scheme, o.host, port, o.verify_tls, o.allow_private_network, o.ssrf_protection, o.connect_timeout_ms]),
    customHeaders: Object.entries(o.custom_headers).map(([k, v]) => [k.toLowerCase(), v]),
  };
}

function compileRoute(r: RouteSnapshot, origin: CompiledOrigin, shaping: RouteShaping): CompiledRoute {
  return {
    id: r.id,
    priority: r.priority,
    matchHost: compileHostPatterns(r.match.hosts),
    matchPath: compilePathGlobs(r.match.paths),
    methods: methodSet(r.match.methods),
    origin,
    stripPrefix: r.strip_prefix && r.strip_prefix !== '/' ? r.strip_prefix.replace(/\/+$/, '') : null,
    snapshot: r,
    shaping,
  };
}

function compileCacheRule(c: CacheRuleSnapshot): CompiledCacheRule {
  const lower = (xs: string[]) => xs.map((x) => x.toLowerCase());
  const includeHeaders = lower(c.cache_key.include_headers).sort();
  const includeCookies = [...c.cache_key.include_cookies].sort();
  const includeQuery = c.cache_key.include_query_params.length ? new Set(c.cache_key.include_query_params) : null;
  const excludeQuery = c.cache_key.exclude_query_params.length ? new Set(c.cache_key.exclude_query_params) : null;
  return {
    id: c.id,
    priority: c.priority,
    matchPath: compilePathGlobs(c.match.paths),
    methods: methodSet(c.match.methods),
    contentTypes: lower(c.match.content_types),
    ttlSeconds: c.ttl_seconds,
    browserTtlSeconds: c.browser_ttl_seconds,
    includeHeaders,
    includeQuery,
    excludeQuery,
    includeCookies,
    bypassCookies: c.bypass.if_cookie_present,
    bypassHeaders: lower(c.bypass.if_header_present),
    bypassQuery: c.bypass.if_query_param_present,
    hasBypass: c.bypass.if_cookie_present.length + c.bypass.if_header_present.length + c.bypass.if_query_param_present.length > 0,
    keyNeedsExtras: includeHeaders.length > 0 || includeCookies.length > 0 || includeQuery !== null || excludeQuery !== null,
    staleWhileRevalidateSeconds: c.stale_while_revalidate_seconds,
    staleIfErrorSeconds: c.stale_if_error_seconds,
    negativeTtlSeconds: c.negative_ttl_seconds,
    cacheStatusHeader: c.cache_status_header,
  };
}

const byPriority = <T extends { priority: number }>(a: T, b: T) => a.priority - b.priority;

/** headerPolicies: the snapshot's response headers policies, compiled once for all endpoints (compileHeaderPolicies). */
export function compileEndpoint(e: EndpointSnapshot, headerPolicies: ReadonlyMap<string, CompiledHeaderPolicy> = new Map()): CompiledEndpoint {
  const responsePolicies = compileResponsePolicies(e, headerPolicies);
  const origins = new Map<string, CompiledOrigin>();
  for (const o of e.origins) origins.set(o.id, compileOrigin(o));
  const defaultOrigin = origins.get(e.default_origin_id);
  if (!defaultOrigin) throw new Error(`endpoint ${e.id}: default_origin_id ${e.default_origin_id} is not one of its origins`);
  const routes: CompiledRoute[] = [];
  for (const r of e.routes) {
    if (!r.enabled) continue;
    const origin = origins.get(r.origin_id);
    if (!origin) throw new Error(`endpoint ${e.id}: route ${r.id} names unknown origin ${r.origin_id}`);
    routes.push(compileRoute(r, origin, responsePolicies.route(r)));
  }
  // Stable sort: equal priorities keep snapshot order. Lower value first, as for IP rules.
  routes.sort(byPriority);
  const defaultRoute: CompiledRoute = {
    id: '',
    priority: Number.MAX_SAFE_INTEGER,
    matchHost: () => true,
    matchPath: () => true,
    methods: null,
    origin: defaultOrigin,
    stripPrefix: null,
    snapshot: null,
    shaping: responsePolicies.endpoint,
  };
  const cacheRules = e.cache_rules.filter((c) => c.enabled).map(compileCacheRule).sort(byPriority);
  const hostnames = [e.hostname, ...e.custom_domains.map((d) => d.hostname)].map(normalizeHost);
  const compiled: CompiledEndpoint = {
    id: e.id, enabled: e.enabled, snapshot: e, origins, routes, defaultRoute, cacheRules, hostnames,
    requestPolicies: compileRequestPolicies(e), pathTokenNames: pathTokenNames(e.signing_keys), responsePolicies,
  };
  return compiled;
}

/**
 * Throws on an inconsistent snapshot (unknown origin ids, duplicate hostnames) so it can be refused whole.
 * With `previous`, an endpoint whose snapshot entry is the very object compiled there is reused as it is
 * (compileEndpoint is a pure function of that entry and of the response headers policies, which the caller
 * guarantees unchanged by passing `previous` only then): a one-endpoint delta on 10,000 endpoints compiles one.
 * The checks across endpoints (ids, hostnames, origin ids) still run over all of them.
 */
export function compileRoutingTable(snapshot: ConfigSnapshot, previous?: RoutingTable): RoutingTable {
  const byHost = new Map<string, CompiledEndpoint>();
  const byId = new Map<string, CompiledEndpoint>();
  const origins = new Map<string, CompiledOrigin>();
  const headerPolicies = compileHeaderPolicies(snapshot.response_headers_policies);
  for (const e of snapshot.endpoints) {
    if (byId.has(e.id)) throw new Error(`duplicate endpoint id ${e.id}`);
    const before = previous?.byId.get(e.id);
    const compiled = before !== undefined && before.snapshot === e ? before : compileEndpoint(e, headerPolicies);
    byId.set(e.id, compiled);
    for (const h of compiled.hostnames) {
      const other = byHost.get(h);
      if (other && other !== compiled) throw new Error(`hostname ${h} is claimed by endpoints ${other.id} and ${e.id}`);
      byHost.set(h, compiled);
    }
    for (const [id, o] of compiled.origins) {
      if (origins.has(id)) throw new Error(`origin id ${id} appears in more than one endpoint`);
      origins.set(id, o);
    }
  }
  return { version: snapshot.version, byHost, byId, origins };
}

export function matchRoute(endpoint: CompiledEndpoint, host: string, path: string, method: string): CompiledRoute {
  const routes = endpoint.routes;
  for (let i = 0; i < routes.length; i++) {
    const r = routes[i];
    if ((r.methods === null || r.methods.has(method)) && r.matchHost(host) && r.matchPath(path)) return r;
  }
  return endpoint.defaultRoute;
}

/** The first rule by priority whose paths and methods match (content types are checked on the response). */
export function matchCacheRule(endpoint: CompiledEndpoint, path: string, method: string): CompiledCacheRule | null {
  const rules = endpoint.cacheRules;
  for (let i = 0; i < rules.length; i++) {
    const c = rules[i];
    // HEAD is answered from GET objects, so a rule for GET also covers HEAD.
    if ((c.methods === null || c.methods.has(method) || (method === 'HEAD' && c.methods.has('GET'))) && c.matchPath(path)) return c;
  }
  return null;
}

export function contentTypeMatches(rule: CompiledCacheRule, contentType: string | undefined): boolean {
  if (rule.contentTypes.length === 0) return true;
  if (!contentType) return false;
  const ct = contentType.toLowerCase();
  for (const prefix of rule.contentTypes) if (ct.startsWith(prefix)) return true;
  return false;
}
