// What the edge can enforce of a response headers policy and of an endpoint's
// custom error pages: one set of rules for both sides. The control plane runs
// them at write time (422 INVALID_CONFIGURATION naming the field) and when it
// compiles a configuration version; the agent runs them when it compiles a
// snapshot and refuses the whole configuration on any problem, so a policy it
// could not send (a header node:http would refuse mid-answer, credentials with
// the origin "*") is never half served. The snapshot's defaults apply to
// members a snapshot leaves out.
import { normalizePath } from '../match/path.ts';
import type { EndpointSnapshot, ResponseHeadersPolicySnapshot } from './snapshot.ts';

export interface PolicyProblem {
  field: string;
  message: string;
}

/**
 * Hop-by-hop and framing fields (RFC 9110 §7.6.1, RFC 9112), and the fields that say how the body's bytes are encoded or cut (the edge
 * compresses and answers ranges itself): the edge owns them; a policy can neither set nor remove them.
 */
export const EDGE_OWNED_HEADERS: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'content-length', 'host', 'proxy-authenticate', 'proxy-authorization',
  'content-encoding', 'content-range',
]);

export const X_FRAME_OPTIONS = ['DENY', 'SAMEORIGIN'] as const;
export const REFERRER_POLICIES = [
  'no-referrer', 'no-referrer-when-downgrade', 'origin', 'origin-when-cross-origin', 'same-origin', 'strict-origin', 'strict-origin-when-cross-origin', 'unsafe-url',
] as const;
export const X_XSS_VALUES = ['0', '1', '1; mode=block'] as const;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** A field value node:http sends (RFC 9110 §5.5: visible characters, spaces and tabs, obs-text; never CR, LF or NUL). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
/** `*`, an origin (`https://example.com`, with a port when not the default), or all subdomains of one (`https://*.example.com`). */
const CORS_ORIGIN = /^https?:\/\/(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:\d{1,5})?$/i;

export const isHeaderName = (name: string) => TOKEN.test(name);
export const isFieldValue = (value: string) => FIELD_VALUE.test(value);
export const isCorsOrigin = (origin: string) => origin === '*' || CORS_ORIGIN.test(origin);

/** The policy as either side holds it: the API's complete record or a snapshot entry (missing members take the snapshot defaults). */
export type HeaderPolicyValues = Pick<
  ResponseHeadersPolicySnapshot,
  'cors' | 'security_headers' | 'custom_response_headers' | 'custom_request_headers' | 'remove_response_headers' | 'remove_request_headers'
>;

/** Everything that would keep the edge from sending the policy as written (empty: it can). */
export function headerPolicyProblems(p: HeaderPolicyValues): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  const problem = (field: string, message: string) => problems.push({ field, message });
  const cors = p.cors;
  const origins = cors.allow_origins ?? ['*'];
  origins.forEach((o, i) => {
    if (!isCorsOrigin(o)) problem(`cors.allow_origins[${i}]`, 'Must be "*" or an origin such as https://example.com (a leading *. allows subdomains)');
  });
  if (cors.enabled && cors.allow_credentials && origins.includes('*')) {
    problem('cors.allow_credentials', 'Browsers refuse credentials with Access-Control-Allow-Origin "*"; list the origins instead');
  }
  (cors.allow_methods ?? []).forEach((m, i) => { if (!isHeaderName(m)) problem(`cors.allow_methods[${i}]`, 'Must be an HTTP method'); });
  for (const list of ['allow_headers', 'expose_headers'] as const) {
    (cors[list] ?? []).forEach((h, i) => { if (h !== '*' && !isHeaderName(h)) problem(`cors.${list}[${i}]`, 'Must be "*" or a header name (an HTTP token)'); });
  }
  const s = p.security_headers;
  const hsts = s.strict_transport_security;
  if (hsts?.preload && (!hsts.include_subdomains || (hsts.max_age_seconds ?? 31_536_000) < 31_536_000)) {
    problem('security_headers.strict_transport_security.preload', 'Preload needs include_subdomains and max_age_seconds of at least 31536000');
  }
  for (const name of ['content_security_policy', 'permissions_policy'] as const) {
    const h = s[name];
    if (h === undefined) continue;
    if (!isFieldValue(h.policy ?? '')) problem(`security_headers.${name}.policy`, 'Must be a single line (no CR, LF or NUL)');
    else if (h.enabled && !(h.policy ?? '').trim()) problem(`security_headers.${name}.policy`, 'Required while the header is enabled');
  }
  const oneOf = (name: 'x_frame_options' | 'referrer_policy' | 'x_xss_protection', allowed: readonly string[]) => {
    const v = s[name]?.value;
    if (v !== undefined && !allowed.includes(v)) problem(`security_headers.${name}.value`, `Must be one of ${allowed.join(', ')}`);
  };
  oneOf('x_frame_options', X_FRAME_OPTIONS);
  oneOf('referrer_policy', REFERRER_POLICIES);
  oneOf('x_xss_protection', X_XSS_VALUES);
  for (const [set, removed] of [['custom_response_headers', 'remove_response_headers'], ['custom_request_headers', 'remove_request_headers']] as const) {
    const seen = new Set<string>();
    p[set].forEach((h, i) => {
      const lower = h.name.toLowerCase();
      if (!isHeaderName(h.name)) problem(`${set}[${i}].name`, 'Must be a header name (an HTTP token)');
      else if (EDGE_OWNED_HEADERS.has(lower)) problem(`${set}[${i}].name`, 'A hop-by-hop or framing header; the edge owns it');
      else if (seen.has(lower)) problem(`${set}[${i}].name`, 'Must not name a header twice (names are case-insensitive)');
      if (!isFieldValue(h.value)) problem(`${set}[${i}].value`, 'Must be a single line (no CR, LF or NUL)');
      seen.add(lower);
    });
    const removing = new Set<string>();
    p[removed].forEach((name, i) => {
      const lower = name.toLowerCase();
      if (!isHeaderName(name)) problem(`${removed}[${i}]`, 'Must be a header name (an HTTP token)');
      else if (EDGE_OWNED_HEADERS.has(lower)) problem(`${removed}[${i}]`, 'A hop-by-hop or framing header; the edge owns it');
      else if (removing.has(lower)) problem(`${removed}[${i}]`, 'Must not name a header twice (names are case-insensitive)');
      removing.add(lower);
    });
    p[set].forEach((h, i) => {
      if (removing.has(h.name.toLowerCase())) problem(`${set}[${i}].name`, `${h.name} is also in ${removed}`);
    });
  }
  return problems;
}

/** What would keep the edge from fetching an endpoint's custom error pages (each path must be absolute and normalisable, one page per code). */
export function errorPageProblems(pages: Pick<EndpointSnapshot['custom_error_pages'][number], 'error_code' | 'response_page_path'>[]): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  const codes = new Set<number>();
  pages.forEach((page, i) => {
    const path = page.response_page_path;
    if (!path.startsWith('/') || path.startsWith('//') || normalizePath(path.split('?')[0]) === null || !isFieldValue(path) || /[\s#]/.test(path)) {
      problems.push({ field: `custom_error_pages[${i}].response_page_path`, message: 'Must be an absolute path on the origin such as /errors/404.html (no encoded slashes, spaces or fragment)' });
    }
    if (codes.has(page.error_code)) problems.push({ field: `custom_error_pages[${i}].error_code`, message: 'Must not name an error_code twice' });
    codes.add(page.error_code);
  });
  return problems;
}
