// Response headers policies (document 3 §2, §4.7), compiled once per
// configuration. On every answer of an endpoint or route that refers to one
// (the route's policy wins over the endpoint's), in this order:
//   1. remove_response_headers are dropped from the answer (and, with
//      cors.override_origin, the origin's Access-Control-Allow-Origin,
//      -Allow-Credentials and -Expose-Headers);
//   2. the enabled security headers, then custom_response_headers, are set:
//      override true replaces the field, false only fills a missing one (a
//      custom header naming a security header's field wins over it);
//   3. CORS (cors.ts): the static fields here, the viewer's Origin echoed per
//      request in the exit.
// None of that depends on the request, so on cache hits it is done once per
// stored object and second (the exit keeps the result with the object's hit
// head). custom_request_headers and remove_request_headers change what goes to
// the origin; the cache key and Vary are computed from the fields as they are
// forwarded ("what is forwarded is what was keyed").
import { headerPolicyProblems } from '../../../shared/src/config/response-policies.ts';
import type { ResponseHeadersPolicySnapshot } from '../../../shared/src/config/snapshot.ts';
import { addStaticCors, compileCors, CORS_ANSWER_FIELDS, type CompiledCors } from './cors.ts';
import { hasHeader, withoutHeaders } from './head.ts';

/** Changes to the fields forwarded to the origin (lower-case names). */
export interface RequestHeaderEdits {
  readonly remove: readonly string[];
  /** override true: replace the viewer's value. */
  readonly set: readonly (readonly [string, string])[];
  /** override false: only when the viewer sent none. */
  readonly fill: readonly (readonly [string, string])[];
}

export interface CompiledHeaderPolicy {
  readonly id: string;
  /** Fields of the answer dropped before the policy's own are added. */
  readonly drop: ReadonlySet<string>;
  /** Fields set whatever the answer had (override true). */
  readonly set: readonly (readonly [string, string])[];
  /** Fields set only when the answer has none (override false). */
  readonly fill: readonly (readonly [string, string])[];
  readonly cors: CompiledCors | null;
  readonly request: RequestHeaderEdits | null;
  /** The policy sets Strict-Transport-Security: sent over HTTPS only (RFC 6797 §7.2; dropped by the exit on plain HTTP). */
  readonly hsts: boolean;
}

export const STS = 'strict-transport-security';

/** The security headers a policy enables, as [field, value, override] in the spec's order. */
function securityFields(s: ResponseHeadersPolicySnapshot['security_headers']): [string, string, boolean][] {
  const out: [string, string, boolean][] = [];
  const hsts = s.strict_transport_security;
  if (hsts?.enabled) {
    const value = `max-age=${hsts.max_age_seconds}${hsts.include_subdomains ? '; includeSubDomains' : ''}${hsts.preload ? '; preload' : ''}`;
    out.push(['strict-transport-security', value, hsts.override]);
  }
  const csp = s.content_security_policy;
  if (csp?.enabled) out.push([csp.report_only ? 'content-security-policy-report-only' : 'content-security-policy', csp.policy, csp.override]);
  if (s.x_content_type_options?.enabled) out.push(['x-content-type-options', 'nosniff', s.x_content_type_options.override]);
  if (s.x_frame_options?.enabled) out.push(['x-frame-options', s.x_frame_options.value, s.x_frame_options.override]);
  if (s.referrer_policy?.enabled) out.push(['referrer-policy', s.referrer_policy.value, s.referrer_policy.override]);
  if (s.permissions_policy?.enabled) out.push(['permissions-policy', s.permissions_policy.policy, s.permissions_policy.override]);
  if (s.x_xss_protection?.enabled) out.push(['x-xss-protection', s.x_xss_protection.value, s.x_xss_protection.override]);
  return out;
}

/** Compiles a policy; throws (the configuration is refused) when the edge could not send it as written. */
export function compileHeaderPolicy(p: ResponseHeadersPolicySnapshot): CompiledHeaderPolicy {
  const problems = headerPolicyProblems(p);
  if (problems.length > 0) throw new Error(`response headers policy ${p.id}: ${problems.map((x) => `${x.field}: ${x.message}`).join('; ')}`);
  // Later entries win for one field: custom headers over security headers.
  const fields = new Map<string, { value: string; override: boolean }>();
  for (const [name, value, override] of securityFields(p.security_headers)) fields.set(name, { value, override });
  for (const h of p.custom_response_headers) fields.set(h.name.toLowerCase(), { value: h.value, override: h.override });
  const cors = compileCors(p.cors);
  const drop = new Set(p.remove_response_headers.map((n) => n.toLowerCase()));
  if (cors !== null && cors.overrideOrigin) for (const f of CORS_ANSWER_FIELDS) drop.add(f);
  const set: [string, string][] = [];
  const fill: [string, string][] = [];
  for (const [name, { value, override }] of fields) {
    if (override) {
      drop.add(name);
      set.push([name, value]);
    } else fill.push([name, value]);
  }
  const requestSet: [string, string][] = [];
  const requestFill: [string, string][] = [];
  for (const h of p.custom_request_headers) (h.override ? requestSet : requestFill).push([h.name.toLowerCase(), h.value]);
  const remove = p.remove_request_headers.map((n) => n.toLowerCase());
  const request = remove.length + requestSet.length + requestFill.length > 0 ? { remove, set: requestSet, fill: requestFill } : null;
  return { id: p.id, drop, set, fill, cors, request, hsts: fields.has(STS) };
}

/** The answer's head under the policy's request-independent fields (steps 1 to 3 above); a new list. */
export function shapeByPolicy(policy: CompiledHeaderPolicy, head: readonly string[]): string[] {
  const out = withoutHeaders(head, policy.drop);
  for (const [name, value] of policy.set) out.push(name, value);
  for (const [name, value] of policy.fill) if (!hasHeader(out, name)) out.push(name, value);
  if (policy.cors !== null) addStaticCors(policy.cors, head, out);
  return out;
}

/** Applies the policy's request edits to fields about to be keyed or forwarded (in place; lower-case names). */
export function applyRequestEdits(edits: RequestHeaderEdits, fields: Record<string, string | string[] | undefined>): void {
  for (const name of edits.remove) delete fields[name];
  for (const [name, value] of edits.set) fields[name] = value;
  for (const [name, value] of edits.fill) if (fields[name] === undefined) fields[name] = value;
}
