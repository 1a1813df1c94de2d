// Fetching and keeping custom error pages (policy/error-pages.ts says when a
// page replaces an answer). A page is fetched from the endpoint's default
// origin (its path_prefix, custom headers and the endpoint's request header
// policy apply; Host is the endpoint's hostname when the origin takes the
// viewer's host) with one timeout over the whole fetch, and kept in the cache
// store for ttl_seconds under a key no viewer request can have, with the
// page's path and Cache-Tag / Surrogate-Key: purging the page's path, one of
// its tags, a wildcard covering it or everything drops it. Concurrent errors
// wait for one fetch. A failed fetch is remembered for a few seconds, so an
// origin that is down is not asked for its error page on every failed request.
import type { Logger } from 'pino';
import type { Readable } from 'node:stream';
import { MAX_PAGE_BYTES, type ErrorPageRule } from '../policy/error-pages.ts';
import { applyRequestEdits } from '../policy/headers.ts';
import { SingleFlight, type CachedObject, type CacheStore } from '../cache/index.ts';
import { headerString, responseTags } from './http-util.ts';
import { CDN_LOOP_TOKEN } from './loop.ts';
import { fetchOrigin, type OriginPools } from './origin-client.ts';
import type { CompiledEndpoint } from './routing.ts';

/** The longest a page fetch may take, whatever the origin's own timeouts. */
export const PAGE_FETCH_TIMEOUT_MS = 5000;
/** How long a failed page fetch is not tried again (the original answers go out meanwhile). */
export const PAGE_RETRY_AFTER_MS = 5000;

export interface ErrorPageDeps {
  store: CacheStore;
  pools: OriginPools;
  logger: Logger;
  /** This agent's Via pseudonym. */
  cacheName: string;
}

export class ErrorPageLoader {
  private readonly deps: ErrorPageDeps;
  private readonly fetching = new SingleFlight<CachedObject | null>();
  private readonly failedUntil = new Map<string, number>();

  constructor(deps: ErrorPageDeps) {
    this.deps = deps;
  }

  /** The page when it is held and within its TTL, null when it cannot be had now, a promise while it is being fetched. */
  page(endpoint: CompiledEndpoint, rule: ErrorPageRule): CachedObject | null | Promise<CachedObject | null> {
    // \x1f\x00: no route id or authority contains NUL, so no viewer request has this key.
    const key = `${endpoint.id}\x1f\x00error-page\x1f\x1f${rule.target}`;
    const now = this.deps.store.now();
    const held = this.deps.store.get(key);
    if (held !== undefined && now - held.responseTimeMs < held.lifetimeMs) return held;
    const failed = this.failedUntil.get(key);
    if (failed !== undefined) {
      if (now < failed) return null;
      this.failedUntil.delete(key);
    }
    return this.fetching.run(key, () => this.fetch(endpoint, rule, key));
  }

  private async fetch(endpoint: CompiledEndpoint, rule: ErrorPageRule, key: string): Promise<CachedObject | null> {
    const { store, pools, cacheName } = this.deps;
    const generation = store.currentGeneration;
    const origin = endpoint.defaultRoute.origin;
    const headers: Record<string, string | string[]> = {
      host: origin.snapshot.forward_host_header ? endpoint.hostnames[0] : origin.hostHeader,
      accept: 'text/html, */*;q=0.8',
      via: `1.1 ${cacheName}`,
    };
    const edits = endpoint.defaultRoute.shaping.headers?.request;
    if (edits) applyRequestEdits(edits, headers);
    for (const [k, v] of origin.customHeaders) headers[k] = v;
    headers['cdn-loop'] = CDN_LOOP_TOKEN;
    try {
      const res = await fetchOrigin(pools, origin, { method: 'GET', path: origin.pathPrefix + rule.target, headers, signal: AbortSignal.timeout(PAGE_FETCH_TIMEOUT_MS) });
      if (res.statusCode < 200 || res.statusCode > 299) {
        await res.body.dump().catch(noop);
        throw new Error(`the origin answered ${res.statusCode}`);
      }
      const body = await readAtMost(res.body, MAX_PAGE_BYTES);
      const contentType = headerString(res.headers['content-type']);
      const page: CachedObject = {
        key, primaryKey: key, endpointId: endpoint.id, path: rule.path, tags: responseTags(res.headers), status: 200,
        headers: contentType === undefined ? [] : [['content-type', contentType]], body, size: body.length + (contentType?.length ?? 0) + 12,
        requestTimeMs: res.requestTimeMs, responseTimeMs: res.responseTimeMs, correctedInitialAgeMs: 0, lifetimeMs: rule.ttlMs,
        mustRevalidate: false, noCache: false, staleWhileRevalidateMs: 0, staleIfErrorMs: 0, etag: undefined, lastModified: undefined,
        varyNames: null, varyValues: '', authorizationAllowed: false, generation, checkedGeneration: generation, cacheRuleId: null,
        browserCacheControl: null, statusHeader: false, hitHeaders: null, hitHeadersAge: -1,
      };
      if (rule.ttlMs > 0) store.set(page);
      return page;
    } catch (err) {
      this.deps.logger.warn({ endpoint: endpoint.id, page: rule.target, err: (err as Error).message }, 'custom error page not fetched: the original answer is sent');
      this.failedUntil.set(key, this.deps.store.now() + PAGE_RETRY_AFTER_MS);
      return null;
    }
  }
}

function noop(): void {}

async function readAtMost(body: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += (chunk as Buffer).length;
    if (total > max) {
      body.on('error', noop).destroy();
      throw new Error(`the page is larger than ${max} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, total);
}
