// The response side of an endpoint, compiled once per configuration: for the
// endpoint and for each of its routes, the header policy and the compression
// settings in force (a route's response_headers_policy_id and
// compression_enabled win over the endpoint's), and the endpoint's custom
// error pages. The proxy's exit applies them to every answer in this order
// (DESIGN.md §8):
//   1. custom error page (error-pages.ts): the page replaces a listed status;
//   2. compression (compression.ts): a stored object's encoded variant is
//      chosen before the exit (proxy/variants.ts), a streamed answer is
//      encoded here; Vary: Accept-Encoding on compressible answers;
//   3. the header policy (headers.ts, cors.ts): removals, security headers,
//      custom headers, CORS;
//   4. the generic hooks (tests, later policies).
// Steps 2 (Vary) and 3 do not depend on the request but for CORS's echo of
// an allowed Origin: shapeHead is their request-independent part, which the
// exit keeps with a cached object's hit head.
import type { EndpointSnapshot, ResponseHeadersPolicySnapshot, RouteSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileCompression, compressible, type CompressionSettings } from './compression.ts';
import { compileErrorPages, type ErrorPageTable } from './error-pages.ts';
import { headerValue, withVary } from './head.ts';
import { compileHeaderPolicy, shapeByPolicy, type CompiledHeaderPolicy } from './headers.ts';
import type { ResponsePolicy } from './index.ts';

/** What shapes the answers of one route (or of the endpoint, for answers given before a route is known). */
export interface RouteShaping {
  readonly headers: CompiledHeaderPolicy | null;
  readonly compression: CompressionSettings | null;
}

export interface ResponsePolicies {
  /** The endpoint's own settings: its default route and answers given before routing. */
  readonly endpoint: RouteShaping;
  /** The settings of one of its routes. */
  route(r: RouteSnapshot): RouteShaping;
  readonly errorPages: ErrorPageTable | null;
  /** Generic hooks run last on every answer (empty unless a test or a later policy adds one). */
  readonly hooks: ResponsePolicy[];
}

/** Every response headers policy of a snapshot, compiled once (endpoints and routes share them); throws on one the edge could not send. */
export function compileHeaderPolicies(policies: readonly ResponseHeadersPolicySnapshot[]): Map<string, CompiledHeaderPolicy> {
  const out = new Map<string, CompiledHeaderPolicy>();
  for (const p of policies) {
    if (out.has(p.id)) throw new Error(`duplicate response headers policy id ${p.id}`);
    out.set(p.id, compileHeaderPolicy(p));
  }
  return out;
}

const NONE: RouteShaping = { headers: null, compression: null };

/** The endpoint's response policies; throws on a reference to a policy the snapshot does not hold, or pages that cannot be fetched. */
export function compileResponsePolicies(e: EndpointSnapshot, headerPolicies: ReadonlyMap<string, CompiledHeaderPolicy>): ResponsePolicies {
  const policy = (id: string | null, owner: string): CompiledHeaderPolicy | null => {
    if (id === null) return null;
    const found = headerPolicies.get(id);
    if (found === undefined) throw new Error(`${owner}: response_headers_policy_id ${id} is not in the configuration`);
    return found;
  };
  const headers = policy(e.response_headers_policy_id, `endpoint ${e.id}`);
  const compression = compileCompression(e.compression);
  const endpoint: RouteShaping = headers === null && compression === null ? NONE : { headers, compression };
  return {
    endpoint,
    route(r) {
      if (r.response_headers_policy_id === null && r.compression_enabled === null) return endpoint;
      const own = r.response_headers_policy_id === null ? headers : policy(r.response_headers_policy_id, `route ${r.id}`);
      const comp = r.compression_enabled === null ? compression : compileCompression(e.compression, r.compression_enabled);
      return own === null && comp === null ? NONE : { headers: own, compression: comp };
    },
    errorPages: compileErrorPages(e),
    hooks: [],
  };
}

/** Whether shapeHead has anything to do for these settings. */
export function shapes(s: RouteShaping): boolean {
  return s.headers !== null || s.compression !== null;
}

/**
 * The request-independent part of steps 2 and 3 (a new list, or `head` itself
 * when nothing applies): Vary: Accept-Encoding on an identity answer the edge
 * would compress for another viewer, then the header policy.
 */
export function shapeHead(s: RouteShaping, status: number, head: string[]): string[] {
  let out = head;
  const c = s.compression;
  if (c !== null && status === 200) {
    const length = headerValue(head, 'content-length');
    if (compressible(status, (name) => headerValue(head, name), length === undefined ? null : Number(length), c)) {
      out = head.slice();
      withVary(out, 'Accept-Encoding');
    }
  }
  return s.headers === null ? out : shapeByPolicy(s.headers, out);
}
