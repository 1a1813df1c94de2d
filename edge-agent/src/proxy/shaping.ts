// The exit's response shaping (policy/response-shaping.ts gives the order):
// custom error pages, compression of streamed answers (stored objects have
// their encoded variants chosen before the exit, variants.ts), and the head
// under the route's header policy. A cache hit's shaped head is kept with the
// object next to the hit head it was made from, so a hit pays two identity
// checks for it (plus the Origin echo for CORS policies that list origins).
import type { Logger } from 'pino';
import { pipeline, type Readable } from 'node:stream';
import { addRequestCors } from '../policy/cors.ts';
import { compressible, compressStream, encodedHead } from '../policy/compression.ts';
import { pageHead, type ErrorPageRule } from '../policy/error-pages.ts';
import { headerValue, withoutHeaders } from '../policy/head.ts';
import { STS } from '../policy/headers.ts';
import { shapeHead, shapes, type RouteShaping } from '../policy/response-shaping.ts';
import type { CachedObject, CacheStore } from '../cache/index.ts';
import { ErrorPageLoader } from './error-pages.ts';
import type { Exchange } from './exchange.ts';
import type { OriginPools } from './origin-client.ts';
import { CompressedVariants } from './variants.ts';

export interface ShaperDeps {
  store: CacheStore;
  pools: OriginPools;
  logger: Logger;
  cacheName: string;
  /** Whether the viewer reached the edge over TLS (this connection, or the trusted proxy's X-Forwarded-Proto). */
  secure: (ex: Exchange) => boolean;
}

const STS_FIELD: ReadonlySet<string> = new Set([STS]);

/** An answer as the exit holds it. */
export interface Answer {
  status: number;
  headers: string[];
  body: Buffer | string | Readable | null;
}

export class ResponseShaper {
  readonly variants: CompressedVariants;
  readonly pages: ErrorPageLoader;
  private readonly secure: (ex: Exchange) => boolean;

  constructor(deps: ShaperDeps) {
    this.secure = deps.secure;
    this.variants = new CompressedVariants(deps.store, deps.logger);
    this.pages = new ErrorPageLoader(deps);
  }

  /** The answer with the error page instead of its body (the original when there is no page to give). */
  withPage(answer: Answer, rule: ErrorPageRule, page: CachedObject | null): Answer {
    if (page === null) return answer;
    const contentType = page.headers.length > 0 ? page.headers[0][1] : undefined;
    return { status: rule.responseCode ?? answer.status, headers: pageHead(answer.headers, contentType, page.body!.length), body: page.body };
  }

  /**
   * A 200 streamed from the origin that the route compresses for this viewer:
   * the encoding stream (fed by the origin's body; an error or an early end of
   * either side ends both) and its head. null: it goes as it is.
   */
  encoded(ex: Exchange, s: RouteShaping, status: number, headers: string[], body: Readable): Answer | null {
    const c = s.compression;
    if (c === null || status !== 200 || ex.vh.range !== undefined) return null;
    const coding = c.negotiate(ex.vh.acceptEncoding);
    if (coding === null) return null;
    const length = headerValue(headers, 'content-length');
    const size = length === undefined ? null : Number(length);
    if (!compressible(status, (name) => headerValue(headers, name), size, c)) return null;
    const encoder = compressStream(coding, size ?? 0);
    pipeline(body, encoder, noop);
    return { status, headers: encodedHead(headers, coding, null), body: encoder };
  }

  /** The head under the route's header policy (and Vary for compression); `entry` is the cached object a hit's head belongs to. */
  head(ex: Exchange, s: RouteShaping, status: number, headers: string[], entry: CachedObject | null): string[] {
    let out = headers;
    if (shapes(s)) {
      if (entry !== null && headers === entry.hitHeaders) {
        const kept = entry.shapedHit;
        if (kept != null && kept.from === headers && kept.by === s) out = kept.headers;
        else {
          out = shapeHead(s, status, headers);
          entry.shapedHit = { from: headers, by: s, headers: out };
        }
      } else out = shapeHead(s, status, headers);
    }
    const policy = s.headers;
    if (policy === null) return out;
    // Where the policy sets HSTS, the field goes over HTTPS only: an HSTS host must not send it over plain HTTP (RFC 6797 §7.2).
    if (policy.hsts && !this.secure(ex)) out = withoutHeaders(out, STS_FIELD);
    const cors = policy.cors;
    if (cors !== null && cors.perRequest) out = addRequestCors(cors, ex.vh.origin, out);
    return out;
  }
}

function noop(): void {}
