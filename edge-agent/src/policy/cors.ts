// CORS of a response headers policy (document 3 §2, cors): the edge answers
// preflights itself and adds the Access-Control-* fields to every answer.
// Compiled once per configuration into what does not depend on the request
// (applied with the policy's other static fields, once per cached object and
// second on hits) and the little that does: echoing an allowed Origin.
//
// - allow_origins `["*"]` without credentials: `Access-Control-Allow-Origin: *`
//   on every answer, nothing per request.
// - a list of origins (exact, or `https://*.example.com` for every subdomain)
//   or credentials: the viewer's Origin is echoed when allowed, with
//   `Access-Control-Allow-Credentials: true` when credentials are on, and
//   every answer carries `Vary: Origin` (a browser cache must not reuse one
//   origin's answer for another).
// - override_origin true: the origin's Access-Control-Allow-Origin,
//   -Allow-Credentials and -Expose-Headers are replaced by the policy's (and
//   dropped for an origin the policy does not allow); false: an answer whose
//   origin sent Access-Control-Allow-Origin keeps the origin's CORS fields
//   untouched, others get the policy's.
// - Preflights (OPTIONS with Origin and Access-Control-Request-Method) are
//   answered at the edge, never forwarded: 204 with the allowed methods,
//   headers and max age when the origin, method and headers are allowed,
//   otherwise 403 without CORS fields (the browser then blocks the request).
import type { IncomingHttpHeaders } from 'node:http';
import type { ResponseHeadersPolicySnapshot } from '../../../shared/src/config/snapshot.ts';
import type { PolicyAnswer } from './index.ts';
import { hasHeader, withVary } from './head.ts';

export const ACAO = 'access-control-allow-origin';
const ACAC = 'access-control-allow-credentials';
const ACEH = 'access-control-expose-headers';
/** The fields of an actual (non-preflight) answer that override_origin governs. */
export const CORS_ANSWER_FIELDS: readonly string[] = [ACAO, ACAC, ACEH];
/** Methods a browser sends cross-origin without asking (Fetch, CORS-safelisted methods). */
const SAFELISTED_METHODS = new Set(['GET', 'HEAD', 'POST']);
const DEFAULT_METHODS = ['GET', 'HEAD'];

export interface CompiledCors {
  /** Any origin, no credentials: `*`, the same on every answer. */
  readonly anyOrigin: boolean;
  /** The answer depends on the viewer's Origin (echo and Vary: Origin). */
  readonly perRequest: boolean;
  readonly credentials: boolean;
  readonly overrideOrigin: boolean;
  /** Access-Control-Expose-Headers value, or null. */
  readonly expose: string | null;
  readonly methods: readonly string[];
  readonly methodSet: ReadonlySet<string>;
  /** Lower-case allowed request headers; anyHeader for "*". */
  readonly headers: ReadonlySet<string>;
  readonly anyHeader: boolean;
  readonly maxAge: string | null;
  allows(origin: string): boolean;
}

export function compileCors(c: ResponseHeadersPolicySnapshot['cors']): CompiledCors | null {
  if (!c.enabled) return null;
  const origins = (c.allow_origins ?? ['*']).map((o) => o.toLowerCase());
  const credentials = c.allow_credentials ?? false;
  const wildcard = origins.includes('*');
  const exact = new Set(origins.filter((o) => o !== '*' && !o.includes('://*.')));
  // https://*.example.com:8443 → scheme "https://", suffix ".example.com", port ":8443" (or none).
  const patterns = origins.filter((o) => o.includes('://*.')).map((o) => {
    const [scheme, rest] = o.split('://*');
    const colon = rest.lastIndexOf(':');
    return colon === -1 ? { prefix: `${scheme}://`, suffix: rest } : { prefix: `${scheme}://`, suffix: rest.slice(0, colon), port: rest.slice(colon) };
  });
  const allowHeaders = (c.allow_headers ?? []).map((h) => h.toLowerCase());
  const methods = (c.allow_methods ?? []).length > 0 ? c.allow_methods!.map((m) => m.toUpperCase()) : DEFAULT_METHODS;
  const expose = c.expose_headers ?? [];
  return {
    anyOrigin: wildcard && !credentials,
    perRequest: !(wildcard && !credentials),
    credentials,
    overrideOrigin: c.override_origin ?? true,
    expose: expose.length > 0 ? expose.join(', ') : null,
    methods,
    methodSet: new Set(methods),
    headers: new Set(allowHeaders),
    anyHeader: allowHeaders.includes('*'),
    maxAge: c.max_age_seconds === null || c.max_age_seconds === undefined ? null : String(c.max_age_seconds),
    allows(origin: string): boolean {
      const o = origin.toLowerCase();
      if (wildcard || exact.has(o)) return true;
      for (const p of patterns) {
        if (!o.startsWith(p.prefix)) continue;
        const port = p.port ?? '';
        if (port !== '' ? !o.endsWith(p.suffix + port) : !o.endsWith(p.suffix)) continue;
        const host = o.slice(p.prefix.length, o.length - p.suffix.length - port.length);
        // At least one label before the suffix, and no port where the pattern has none.
        if (host.length > 0 && !host.includes(':') && !host.includes('/')) return true;
      }
      return false;
    },
  };
}

/** The request-independent CORS fields, added to `out` (a private copy, origin fields already dropped when overriding). */
export function addStaticCors(cors: CompiledCors, original: readonly string[], out: string[]): void {
  if (cors.perRequest) {
    withVary(out, 'Origin');
    return;
  }
  if (!cors.overrideOrigin && hasHeader(original, ACAO)) return;
  out.push(ACAO, '*');
  if (cors.expose !== null) out.push(ACEH, cors.expose);
}

/**
 * The fields that depend on the viewer's Origin (policies with perRequest):
 * `head` itself when nothing is added (no Origin, not allowed, or the origin's
 * own CORS answer kept), otherwise a copy with them.
 */
export function addRequestCors(cors: CompiledCors, origin: string | undefined, head: string[]): string[] {
  if (origin === undefined || !cors.allows(origin)) return head;
  if (!cors.overrideOrigin && hasHeader(head, ACAO)) return head;
  const out = head.concat(ACAO, origin);
  if (cors.credentials) out.push(ACAC, 'true');
  if (cors.expose !== null) out.push(ACEH, cors.expose);
  return out;
}

const PREFLIGHT_REFUSED = 'CORS preflight refused\n';

/**
 * The edge's answer to a CORS preflight (OPTIONS with Origin and
 * Access-Control-Request-Method), null when the request is not one. The
 * Access-Control-Allow-Origin/-Credentials fields and Vary: Origin are added in
 * the exit like on every answer (addStaticCors, addRequestCors).
 */
export function preflightAnswer(cors: CompiledCors, h: IncomingHttpHeaders): PolicyAnswer | null {
  const origin = h.origin;
  const method = h['access-control-request-method'];
  if (origin === undefined || typeof method !== 'string') return null;
  const requested = (h['access-control-request-headers'] ?? '').split(',').map((s) => s.trim().toLowerCase()).filter((s) => s !== '');
  const m = method.trim().toUpperCase();
  const methodOk = cors.methodSet.has(m) || SAFELISTED_METHODS.has(m);
  const headersOk = cors.anyHeader || requested.every((r) => cors.headers.has(r));
  const vary = 'Access-Control-Request-Method, Access-Control-Request-Headers';
  if (!cors.allows(origin) || !methodOk || !headersOk) {
    return {
      status: 403,
      headers: ['content-type', 'text/plain; charset=utf-8', 'content-length', String(PREFLIGHT_REFUSED.length), 'cache-control', 'no-store', 'vary', vary],
      body: PREFLIGHT_REFUSED,
    };
  }
  const headers = ['access-control-allow-methods', cors.methods.join(', '), 'vary', vary, 'content-length', '0'];
  // "*" is a wildcard only without credentials (Fetch): with them, the requested names are echoed.
  if (requested.length > 0) headers.push('access-control-allow-headers', cors.anyHeader && cors.credentials ? requested.join(', ') : [...cors.headers].join(', '));
  if (cors.maxAge !== null) headers.push('access-control-max-age', cors.maxAge);
  return { status: 204, headers, body: null };
}
