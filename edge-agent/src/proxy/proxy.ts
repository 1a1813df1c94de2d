// The viewer-facing request path (DESIGN.md §8), in the order a request meets
// it: request normalisation (exchange.ts) → endpoint by Host → request
// policies → route → cache rule → lookup and freshness (lookup.ts) → serve
// from cache (serve-cached.ts), or collapse (collapse.ts) onto one cache fill
// (storing.ts), or forward as is (forward.ts). Every answer leaves through the
// one exit (exit.ts): response policies, access record, metrics.
// Cache hits are answered synchronously from a stored Buffer with a header
// list rebuilt at most once per second per object (only Age changes).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Counter, Histogram } from 'prom-client';
import type { CacheStatus, TrafficCounters } from '../metrics/traffic.ts';
import type { LogDrains } from '../logs/drains.ts';
import { resolveViewer, type TrustedProxy, type Viewer } from '../policy/client-address.ts';
import { packagedCountryDatabase } from '../policy/geo.ts';
import { preflightAnswer } from '../policy/cors.ts';
import { takePathToken } from '../policy/signed-urls.ts';
import type { PolicyRequest } from '../policy/index.ts';
import { fillOnce, freshness, staleIfErrorAllowed, type CachedObject, type CacheStore, type FillTurns, type NodeFillLock } from '../cache/index.ts';
import { Collapser, isErrorStatusForStale } from './collapse.ts';
import { Exchange, normalizeRequest, type RoutedExchange } from './exchange.ts';
import { dispose, Exit } from './exit.ts';
import { Forwarder, originErrorBody } from './forward.ts';
import { bypassMatches } from './http-util.ts';
import { cacheKeys, requestDirectives, staleOnDisconnectAllowed, usableObject, varyMatches } from './lookup.ts';
import type { OriginError, OriginPools, OriginResponse } from './origin-client.ts';
import { matchCacheRule, matchRoute, type RoutingTable } from './routing.ts';
import { serveFromCache } from './serve-cached.ts';
import { ResponseShaper } from './shaping.ts';
import { Slicer } from './slices.ts';
import { CacheFiller, type FillControl, type FillResult, type SliceSettings } from './storing.ts';
import type { CertificateTable } from '../tls/certificates.ts';
import { holdStreamSlot } from '../tls/http2-server.ts';
import { loopRefusal, loopVisits, MAX_LOOP_VISITS } from './loop.ts';
import type { ShieldDeps } from './forward.ts';

/** The country of a connection's peer, looked up once (access records and traffic rollups). */
const COUNTRY = Symbol('country of the connection');

export interface ProxyOptions {
  defaultEndpointId: string | null;
  maxObjectBytes: number;
  /** Cache name in Cache-Status (RFC 9211) and Via. */
  cacheName: string;
  /** Longest pause allowed between chunks of a viewer's body being forwarded (0: none). */
  bodyIdleTimeoutMs?: number;
  /** The proxy in front of the agent whose client-address header is believed (TRUST_PROXY_HEADER); null: the socket's peer. */
  trustedProxy?: TrustedProxy | null;
  /** The port redirects to HTTPS name (null: the default, 443). */
  httpsPort?: () => number | null;
  /** Large objects kept in slices (slices.ts): slice size and the size above which a full answer is sliced; absent: never. */
  slicing?: SliceSettings | null;
}

export interface ProxyDeps {
  table: () => RoutingTable;
  store: CacheStore;
  pools: OriginPools;
  traffic: TrafficCounters;
  originLatency: Histogram<'origin' | 'status_class'> | null;
  /** Requests refused by a request policy, by endpoint, policy and reason. */
  policyDenials?: Counter<'endpoint' | 'policy' | 'reason'> | null;
  /** The log drains the exit hands access records to. */
  logs?: LogDrains | null;
  /** Workers sharing a node tier: one fills a key at a time, the others then read it (node-fills.ts). */
  fillLock?: NodeFillLock | null;
  logger: Logger;
  options: ProxyOptions;
  /** The names served over TLS: a request on a TLS connection must be for a name its handshake covers (421 otherwise). */
  tls?: CertificateTable | null;
  /** Origin shield: the map and keys (shield-directory.ts), and the connections to shield nodes. */
  shield?: ShieldDeps | null;
}

export class Proxy {
  private readonly deps: ProxyDeps;
  private readonly exit: Exit;
  private readonly forwarder: Forwarder;
  private readonly filler: CacheFiller;
  private readonly slicer: Slicer;
  private readonly collapser = new Collapser();
  /**
   * While true, nothing is answered from the cache: every GET/HEAD is a miss that
   * goes to the origin (and may be stored). Set while the agent catches up with
   * purges it missed (EdgeAgent.beginPurgeCatchUp); read once per request.
   */
  cacheReadsSuspended = false;
  /**
   * While true, every cached object is revalidated with the origin before it is served, and never served stale
   * on an origin error: the agent is cut off from the control plane and may have missed purges
   * (EdgeAgent.controlPlaneLost with CACHE_WHEN_DISCONNECTED=revalidate). Read once per cached request.
   */
  revalidateAll = false;

  /** The node fill lock's answers to this worker (lead, follow: waited for another worker's fill, alone: no answer in time). */
  readonly fillTurns: FillTurns = { lead: 0, follow: 0, alone: 0 };

  /** The exchange's viewer, resolved on first use (ex.viewer). */
  private readonly viewerOf: (ex: Exchange) => Viewer;

  constructor(deps: ProxyDeps) {
    this.deps = deps;
    const { options } = deps;
    const trusted = options.trustedProxy ?? null;
    // The viewer as the socket's peer or the trusted proxy's header says, resolved once per exchange.
    const viewerOf = (ex: Exchange): Viewer => (ex.viewer ??= resolveViewer(ex.req, trusted));
    this.viewerOf = viewerOf;
    // Without a trusted proxy header the viewer is the socket's peer: its country is looked up once per connection
    // (an HTTP/2 request's socket is its session's TLS connection: tls/http2-server.ts).
    const country = (ex: Exchange): string | null => {
      const socket = ex.req.socket as IncomingMessage['socket'] & { [COUNTRY]?: string | null };
      const perConnection = trusted === null;
      if (perConnection) {
        const known = socket[COUNTRY];
        if (known !== undefined) return known;
      }
      const client = viewerOf(ex).address;
      const found = client === null ? null : packagedCountryDatabase().country(client);
      if (perConnection) socket[COUNTRY] = found;
      return found;
    };
    this.exit = new Exit(deps.traffic, deps.logger, options.cacheName, new ResponseShaper({ store: deps.store, pools: deps.pools, logger: deps.logger, cacheName: options.cacheName, secure: (ex) => viewerOf(ex).secure }),
      deps.logs ?? null, { country, address: (ex) => viewerOf(ex).address?.text ?? '', secure: (ex) => viewerOf(ex).secure });
    this.forwarder = new Forwarder({
      shield: deps.shield ?? null,
      pools: deps.pools, store: deps.store, exit: this.exit, logger: deps.logger, originLatency: deps.originLatency,
      cacheName: options.cacheName, bodyIdleTimeoutMs: options.bodyIdleTimeoutMs ?? 0,
    });
    const slicing = options.slicing != null && options.slicing.sliceBytes > 0 ? options.slicing : null;
    this.filler = new CacheFiller({ store: deps.store, forwarder: this.forwarder, maxObjectBytes: options.maxObjectBytes, slicing });
    this.slicer = new Slicer({
      store: deps.store, forwarder: this.forwarder, filler: this.filler, exit: this.exit, fillLock: deps.fillLock ?? null, logger: deps.logger,
      settings: slicing ?? { sliceBytes: 0, thresholdBytes: 0 }, fillTurns: this.fillTurns, staleOnError: (stale, error) => this.staleOnError(stale, error),
    });
  }

  /** Slices fetched from the origin since start (tests and metrics). */
  get sliceFills(): number {
    return this.slicer.fills;
  }

  /** Answers from a stored object: whole, or slice after slice. */
  private serve(ex: RoutedExchange, entry: CachedObject, status: CacheStatus, now: number): void {
    if (entry.sliced === undefined) return serveFromCache(this.exit, ex, entry, status, now);
    this.sliced(ex, this.slicer.serve(ex, entry, status));
  }

  /** Slice work a viewer's request started: its failure answered, and (HTTP/2) its stream's slot held until it ends. */
  private sliced(ex: RoutedExchange, work: Promise<void>): void {
    holdStreamSlot(ex.req, work);
    work.catch((err: unknown) => this.fail(ex, err));
  }

  /** Requests that waited for another one's cache fill instead of asking the origin, since start (tests). */
  get collapsedFollowers(): number {
    return this.collapser.joined + this.slicer.joined;
  }

  /** Resolves once no cache fill runs (background refreshes and range fills included). */
  settled(): Promise<void> {
    return this.collapser.settled();
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    const ex = new Exchange(req, res, performance.now());
    // `OPTIONS *` asks about the server itself (RFC 9110 §9.3.7): agents probe a shield's liveness with it (shield-directory.ts).
    if (ex.method === 'OPTIONS' && req.url === '*') return void this.exit.send(ex, 204, ['allow', 'GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE'], null, 'BYPASS');
    const refusal = normalizeRequest(ex);
    const table = this.deps.table();
    let endpoint = table.byHost.get(ex.host);
    if (endpoint === undefined) {
      const fallback = this.deps.options.defaultEndpointId;
      if (fallback !== null) endpoint = table.byId.get(fallback);
    }
    // A malformed Host leaves ex.host empty; a bad path with a good Host is the endpoint's refusal.
    if (refusal !== null) {
      if (endpoint !== undefined && ex.host !== '') ex.endpoint = endpoint;
      return this.exit.refuse(ex, 400, refusal);
    }
    if (endpoint === undefined) return this.exit.refuse(ex, 421, 'No endpoint is configured for this host\n');
    ex.endpoint = endpoint;
    // A request that already passed through this CDN more often than any legitimate path goes is a loop (loop.ts).
    const visits = (ex.loopVisits = loopVisits(ex.vh.cdnLoop));
    if (visits > MAX_LOOP_VISITS) return this.exit.refuse(ex, 508, loopRefusal(visits));
    // Another agent asking this one as a shield: its viewer was checked there. Accepted by a shield node whatever
    // region its configuration names as the endpoint's shield, so agents on different versions never bounce a hop.
    if (ex.vh.shieldHop !== undefined && this.deps.shield?.directory.shieldsItsRegion) this.acceptHop(ex);
    if (ex.shieldHop === null) {
      const socket = req.socket as { encrypted?: boolean; servername?: string | false | null };
      if (socket.encrypted === true && this.deps.tls && !this.deps.tls.sameConnection(socket.servername || null, ex.host)) {
        // Another name's certificate or TLS settings apply to this host: the viewer must open a connection for it.
        return this.exit.refuse(ex, 421, 'This connection was not made for this host\n');
      }
      if (!endpoint.snapshot.ipv6_enabled && this.arrivedOverIpv6(ex)) {
        // A CDN withholds the AAAA record of such an endpoint: a viewer here over IPv6 came by an address it was not given.
        return this.exit.refuse(ex, 421, 'This endpoint is not served over IPv6\n');
      }
    }
    if (!endpoint.enabled) return this.exit.refuse(ex, 403, 'This endpoint is disabled\n');
    const method = ex.method;
    if (endpoint.pathTokenNames.length > 0) this.takePathToken(ex, endpoint.pathTokenNames);
    // Matched first because redirect rules belong to routes; matching has no effect of its own.
    ex.route = matchRoute(endpoint, ex.host, ex.path, method);
    const rx = ex as RoutedExchange;
    if (ex.shieldHop === null) {
      if (endpoint.requestPolicies.length > 0 && this.requestPolicies(rx)) return;
      if (method === 'OPTIONS' && this.preflight(rx)) return;
    }
    if (method !== 'GET' && method !== 'HEAD') {
      void this.forwarder.forward(rx, 'BYPASS', true, method === 'POST' ? (answer) => this.keepPostAnswer(rx, answer) : undefined);
      return;
    }
    const rule = (ex.rule = matchCacheRule(endpoint, ex.path, method));
    if (rule !== null && rule.hasBypass && bypassMatches(ex.headers, rule, ex.query)) {
      void this.forwarder.forward(rx, 'BYPASS', false);
      return;
    }
    const store = this.deps.store;
    const { primary, key } = cacheKeys(rx, store);
    if (this.cacheReadsSuspended) return this.withEntry(rx, primary, key, undefined);
    this.withEntry(rx, primary, key, store.get(key));
  };

  /** A request carrying a valid shield hop header (shield-directory.ts) is another agent's: marked on the exchange. */
  private acceptHop(ex: Exchange): void {
    ex.shieldHop = this.deps.shield!.directory.verifyHop(ex.vh.shieldHop, ex.method, ex.vh.host ?? '', ex.req.url ?? '/');
  }

  /**
   * Whether the request came back through this CDN other than as the one hop from an edge to its shield (an
   * origin that is the CDN itself, or another endpoint of it): it never waits on another request's fill, which
   * may be the very fill it is part of.
   */
  private returning(ex: Exchange): boolean {
    return ex.loopVisits > (ex.shieldHop === null ? 0 : 1);
  }

  /** Whether the viewer (the socket's peer, or the trusted proxy's header) has an IPv6 address (v4-mapped ones are IPv4). */
  private arrivedOverIpv6(ex: Exchange): boolean {
    const client = this.viewerOf(ex).address;
    return client !== null && !client.v4;
  }

  /**
   * A prefix token in a path segment (`/videos/123/token=.../index.m3u8`) is taken out of the path before routing:
   * routes, cache rules, the cache key and the origin request see the path without it; the signed-URL check reads it.
   */
  private takePathToken(ex: Exchange, names: readonly string[]): void {
    const taken = takePathToken(ex.path, names);
    if (taken === null) return;
    ex.path = taken.path;
    ex.pathToken = taken.token;
  }

  /** Runs the endpoint's request policies; true when one answered (the exchange is done). */
  private requestPolicies(ex: RoutedExchange): boolean {
    const viewer = this.viewerOf(ex);
    const client = viewer.address;
    const pctx: PolicyRequest = {
      req: ex.req, endpoint: ex.endpoint, host: ex.host, path: ex.path, query: ex.query, rawQuery: ex.query, pathToken: ex.pathToken, cookie: ex.vh.cookie,
      client, clientIp: client?.text ?? '', secure: viewer.secure, routeId: ex.route.id, httpsPort: this.deps.options.httpsPort?.() ?? null,
    };
    for (const p of ex.endpoint.requestPolicies) {
      const answer = p(pctx);
      if (answer === null) continue;
      if (answer.denial !== undefined) {
        ex.denial = answer.denial;
        this.deps.policyDenials?.inc({ endpoint: ex.endpoint.id, policy: answer.denial.policy, reason: answer.denial.reason });
      }
      void this.exit.send(ex, answer.status, answer.headers, answer.body, 'BYPASS');
      return true;
    }
    ex.query = pctx.query;
    if (pctx.cookie !== ex.vh.cookie) {
      // The signed-URL check took its token cookies out: the rest is what the cache key and the origin request read
      // (applied when the forwarded fields are built, so a hit still never materialises req.headers).
      ex.vh.cookie = pctx.cookie;
      ex.cookieEdit = { value: pctx.cookie };
    }
    return false;
  }

  /** A CORS preflight to a route whose header policy has CORS on is answered here, never forwarded (policy/cors.ts); true when answered. */
  private preflight(ex: RoutedExchange): boolean {
    const cors = ex.route.shaping.headers?.cors;
    if (!cors) return false;
    const answer = preflightAnswer(cors, ex.req.headers);
    if (answer === null) return false;
    ex.req.resume();
    void this.exit.send(ex, answer.status, answer.headers, answer.body, 'BYPASS');
    return true;
  }

  private withEntry(ex: RoutedExchange, primary: string, key: string, found: CachedObject | undefined): void {
    const entry = usableObject(ex, found);
    const reqCC = requestDirectives(ex);
    const now = this.deps.store.now();
    const hasAuth = ex.vh.authorization !== undefined;
    // Alone: its fill neither joins nor is joined by another request's.
    const alone = hasAuth || this.returning(ex);
    if (entry !== undefined) {
      const f = this.revalidateAll ? 'stale' : freshness(entry, reqCC, now);
      if (f === 'fresh') return this.serve(ex, entry, 'HIT', now);
      if (reqCC['only-if-cached'] !== undefined) return this.exit.refuse(ex, 504, 'Not in cache (only-if-cached)\n', 'BYPASS');
      if (f === 'revalidate-in-background') {
        this.serve(ex, entry, 'UPDATING', now);
        if (entry.sliced !== undefined) this.slicer.refresh(ex, entry);
        else if (!this.collapser.has(key)) this.backgroundFill(ex, primary, key, entry);
        return;
      }
      if (entry.sliced !== undefined) return this.sliced(ex, this.slicer.revalidate(ex, entry));
      void this.missOrStale(ex, primary, key, entry, alone);
      return;
    }
    if (reqCC['only-if-cached'] !== undefined) return this.exit.refuse(ex, 504, 'Not in cache (only-if-cached)\n', 'MISS');
    if (ex.vh.range !== undefined && !alone && reqCC['no-store'] === undefined) {
      // Ask the origin for the slice holding the range's first byte (slices.ts): what it says makes the object's head.
      if (this.slicer.handles(ex.vh.range)) return this.sliced(ex, this.slicer.rangeMiss(ex, primary));
      // Without slices: serve the range from the origin now and fill the cache with the whole object in the background,
      // so the next seek is a hit without making this viewer wait for the full object.
      // The fill is the edge's own clean request (no Range, conditionals or credentials), one per key.
      if (!this.collapser.has(key)) this.backgroundFill(ex, primary, key, null, true);
      void this.forwarder.forward(ex, 'MISS', false);
      return;
    }
    void this.missOrStale(ex, primary, key, undefined, alone);
  }

  /**
   * A fill nobody waits on (stale-while-revalidate refresh, range fill): no hints go out, and an unstorable
   * body is dropped. withoutCredentials: the range fill, sent without the viewer's credentials.
   */
  private backgroundFill(ex: RoutedExchange, primary: string, key: string, stale: CachedObject | null, withoutCredentials = false): void {
    const fill = this.collapser.lead(key, true, null, (control) => this.nodeWideFill(ex, primary, key, stale, false, control, withoutCredentials));
    // Origin work a viewer's request started counts against its HTTP/2 connection's streams until it ends.
    holdStreamSlot(ex.req, fill);
    fill.then(
      (result) => {
        if (result.type === 'passthrough') dispose(result.body);
        else if (result.type === 'sliced') result.source?.dispose();
      },
      (err: unknown) => this.deps.logger.debug({ endpoint: ex.endpoint.id, path: ex.path, err: (err as Error)?.message }, 'background fill failed'),
    );
  }

  /** Miss or stale: one origin fetch per key; concurrent requests wait for it and share a storable result. */
  private async missOrStale(ex: RoutedExchange, primary: string, key: string, stale: CachedObject | undefined, alone: boolean): Promise<void> {
    try {
      const pending = alone ? undefined : this.collapser.join(key, ex.res);
      if (pending !== undefined) {
        const shared = await pending;
        if (shared.entry !== null && varyMatches(ex, shared.entry)) return this.serve(ex, shared.entry, shared.status, this.deps.store.now());
        if ((shared.error !== null || shared.failedStatus) && this.staleOnError(stale, shared.error)) {
          return this.serve(ex, stale, 'STALE', this.deps.store.now());
        }
        if (shared.error !== null) return this.exit.refuse(ex, shared.error.status, originErrorBody(shared.error), 'MISS');
        // Not shareable (private, no-store, Vary mismatch...): this request goes to the origin itself.
        await this.forwarder.forward(ex, stale ? 'EXPIRED' : 'MISS', false);
        return;
      }
      // Cancelled when this viewer and every follower leave before the answer is being kept (collapse.ts).
      const fill = this.collapser.lead(key, !alone, ex.res, (control) => alone
        ? this.filler.fill(ex, primary, stale ?? null, true, false, control)
        : this.nodeWideFill(ex, primary, key, stale ?? null, true, control));
      holdStreamSlot(ex.req, fill);
      const result = await fill;
      await this.answerLeader(ex, result, stale);
    } catch (err) {
      this.fail(ex, err);
    }
  }

  /**
   * A fill of key for this worker's collapsed requests, and for the node's other workers: with a fill lock, the
   * first worker to miss fills; one that missed meanwhile waits for that fill and serves what it stored, or
   * fills alone when nothing usable was stored (not shareable, refused, or the wait ran out).
   */
  private nodeWideFill(ex: RoutedExchange, primary: string, key: string, stale: CachedObject | null, viewerWaiting: boolean, control: FillControl, withoutCredentials = false): Promise<FillResult> {
    const store = this.deps.store;
    return fillOnce<FillResult>(this.cacheReadsSuspended ? null : this.deps.fillLock ?? null, key,
      () => this.filler.fill(ex, primary, stale, viewerWaiting, withoutCredentials, control),
      () => {
        const stored = this.storedMeanwhile(ex);
        return stored !== undefined ? { type: 'stored', entry: stored, status: 'HIT' } : undefined;
      },
      async (result) => { if (result.type === 'stored' || result.type === 'sliced') await store.written(result.entry.key); }, this.fillTurns);
  }

  /** What another worker's fill left in the node tier for this request: usable and fresh, else undefined. */
  private storedMeanwhile(ex: RoutedExchange): CachedObject | undefined {
    const store = this.deps.store;
    const found = usableObject(ex, store.get(cacheKeys(ex, store).key));
    if (found === undefined || !varyMatches(ex, found)) return undefined;
    return freshness(found, requestDirectives(ex), this.deps.store.now()) === 'fresh' ? found : undefined;
  }

  private async answerLeader(ex: RoutedExchange, result: FillResult, stale: CachedObject | undefined): Promise<void> {
    if (result.type === 'stored') return this.serve(ex, result.entry, result.status, this.deps.store.now());
    if (result.type === 'sliced') return this.slicer.serve(ex, result.entry, result.status, result.source);
    if (result.type === 'error') {
      // Abandoned by everyone who waited (its origin request cancelled): recorded as the viewer's leaving, not an origin failure.
      if (ex.res.destroyed) return this.exit.abandoned(ex, stale ? 'EXPIRED' : 'MISS');
      if (this.staleOnError(stale, result.error)) return this.serve(ex, stale, 'STALE', this.deps.store.now());
      this.forwarder.logFailure(ex, result.error);
      return this.exit.refuse(ex, result.error.status, originErrorBody(result.error), stale ? 'EXPIRED' : 'MISS');
    }
    const r = result.response;
    if (isErrorStatusForStale(r.statusCode) && this.staleOnError(stale)) {
      result.body.resume();
      return this.serve(ex, stale, 'STALE', this.deps.store.now());
    }
    await this.forwarder.stream(ex, r, result.body, stale ? 'EXPIRED' : 'MISS');
  }

  /**
   * The stale object may answer instead of the origin's failure: under stale-if-error, or (error) when the
   * origin refused, closed or reset the connection and the response did not forbid stale answers. Never
   * while every object must be revalidated.
   */
  private staleOnError(stale: CachedObject | undefined, error: OriginError | null = null): stale is CachedObject {
    return stale !== undefined && !this.revalidateAll && (staleIfErrorAllowed(stale, this.deps.store.now()) || staleOnDisconnectAllowed(stale, error));
  }

  /**
   * RFC 9110 §9.3.3: a POST's 200 or 203 with explicit freshness whose Content-Location is its own URL is kept,
   * under the GET cache rule of that URL, for later GETs of it; the viewer gets the answer as it came (MISS).
   * True when the viewer was answered here.
   */
  private async keepPostAnswer(ex: RoutedExchange, answer: OriginResponse): Promise<boolean> {
    if ((answer.statusCode !== 200 && answer.statusCode !== 203) || !this.forwarder.contentLocationIsTarget(ex, answer)) return false;
    const rule = matchCacheRule(ex.endpoint, ex.path, 'GET');
    if (rule !== null && rule.hasBypass && bypassMatches(ex.headers, rule, ex.query)) return false;
    ex.rule = rule;
    try {
      const store = this.deps.store;
      const { primary } = cacheKeys(ex, store);
      // Taken after the POST's own invalidation of the path, which this answer replaces.
      const result = await this.filler.keepPostAnswer(ex, primary, answer, store.currentGeneration);
      if (result.type === 'stored') await this.forwarder.stream(ex, answer, result.entry.body!, 'MISS');
      else if (result.type === 'passthrough') await this.forwarder.stream(ex, answer, result.body, 'BYPASS');
      else if (result.type === 'sliced') throw new Error('a POST answer is never kept in slices');
      else {
        this.forwarder.logFailure(ex, result.error);
        this.exit.refuse(ex, result.error.status, originErrorBody(result.error), 'BYPASS');
      }
    } catch (err) {
      dispose(answer.body);
      this.fail(ex, err);
    }
    return true;
  }

  private fail(ex: RoutedExchange, err: unknown): void {
    this.deps.logger.error({ endpoint: ex.endpoint.id, path: ex.path, err: (err as Error)?.message }, 'request failed');
    this.exit.refuse(ex, 500, 'Internal error\n', 'MISS');
  }
}
