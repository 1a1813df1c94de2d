// The Origin and Origin health records of document 3 §2 and the origin
// request bodies. Custom header values are never shown: every reply (and the
// audit trail) carries MASKED_VALUE in their place.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { orNull, timestamp, timestampOrNull, uuid, withExample } from '../http/schemas.ts';
import { originSnapshot } from '../../../shared/src/config/snapshot.ts';
import { HEALTH_STATUSES, ORIGIN_SCHEMES, RETRY_ON, type Origin } from './cdn.entities.ts';
import { declared, idOf, nameField, tagsField, tokenField } from './fields.ts';

export const MASKED_VALUE = '***';
export const MAX_CUSTOM_HEADERS = 50;

export const originRecord = z.object({
  id: z.uuid(),
  distribution_id: orNull(z.uuid()).describe('The endpoint the origin belongs to; null until an endpoint or route uses it'),
  name: z.string(),
  url: z.string().describe('scheme://host:port/path_prefix, derived'),
  scheme: z.enum(ORIGIN_SCHEMES),
  host: z.string(),
  port: z.number().int(),
  path_prefix: z.string(),
  protocol: z.enum(ORIGIN_SCHEMES).describe('The protocol the edge speaks to the origin (the scheme); read-only'),
  enabled: z.boolean(),
  health_status: z.enum(HEALTH_STATUSES),
  health_check_url: orNull(z.string()),
  health_check_interval_seconds: z.number().int(),
  verify_tls: z.boolean(),
  allow_private_network: z.boolean(),
  ssrf_protection: z.boolean(),
  timeout_ms: z.number().int(),
  connect_timeout_ms: z.number().int(),
  max_retries: z.number().int(),
  retry_on: z.array(z.enum(RETRY_ON)),
  forward_host_header: z.boolean(),
  custom_headers: z.record(z.string(), z.string()).describe(`Header names as stored; every value shows as "${MASKED_VALUE}"`),
  tags: z.array(z.string()),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const originResource = versioned(originRecord);

/** Header names with values masked: for replies and the audit trail. */
export const maskedHeaders = (headers: Record<string, string>) => Object.fromEntries(Object.keys(headers).map((name) => [name, MASKED_VALUE]));

export function originUrl(o: Pick<Origin, 'scheme' | 'host' | 'port' | 'path_prefix'>): string {
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  return `${o.scheme}://${host}:${o.port}${o.path_prefix}`;
}

/** The value a route hands over: the origin with its derived fields and masked headers. */
export function presentOrigin(o: Origin) {
  return { ...o, distribution_id: idOf(o.distribution), url: originUrl(o), protocol: o.scheme, custom_headers: maskedHeaders(o.custom_headers) };
}

export const originHealthRecord = z.object({
  origin_id: z.uuid(),
  status: z.enum(HEALTH_STATUSES),
  latency_ms: orNull(z.number().int()),
  last_success_at: timestampOrNull(),
  last_failure_at: timestampOrNull(),
  failure_reason: orNull(z.string()),
  consecutive_failures: z.number().int(),
  checked_at: timestampOrNull(),
});

// Hop-by-hop and framing fields the edge owns; an origin cannot be told to send them.
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'proxy-connection', 'expect']);

const customHeaders = z.record(
  tokenField('header').refine((name) => !RESERVED_HEADERS.has(name.toLowerCase()), 'This header is set by the edge and cannot be configured'),
  z.string().max(4096).regex(/^[^\r\n\u0000]*$/, 'Must be a single line'),
).refine((h) => Object.keys(h).length <= MAX_CUSTOM_HEADERS, `At most ${MAX_CUSTOM_HEADERS} headers`)
  .refine((h) => new Set(Object.keys(h).map((k) => k.toLowerCase())).size === Object.keys(h).length, 'Must not name a header twice (names are case-insensitive)')
  .describe(`Sent to the origin on every request. On update, a value of "${MASKED_VALUE}" keeps the stored value of that header`);

const httpUrl = (max: number) => z.url({ protocol: /^https?$/, message: 'Must be an http or https URL' }).max(max);

const edge = originSnapshot.shape;

const originFields = {
  name: nameField(),
  url: httpUrl(2048).describe('Convenience form of scheme, host, port and path_prefix (give either)'),
  scheme: declared(edge.scheme),
  host: z.string().trim().min(1).max(253).describe('A DNS name or an IP address; refused (422) when it is or resolves to a private or special address and allow_private_network is false'),
  port: declared(edge.port),
  path_prefix: declared(edge.path_prefix).regex(/^(\/[^\s?#]*)?$/, 'Must be empty or an absolute path without query or fragment'),
  enabled: declared(edge.enabled),
  health_check_url: httpUrl(2048).nullable(),
  // The API's bound is tighter than the agent's (1 s): a probe from every node of the fleet each second is a load on the origin.
  health_check_interval_seconds: declared(edge.health_check_interval_seconds).min(5),
  verify_tls: declared(edge.verify_tls),
  allow_private_network: declared(edge.allow_private_network),
  ssrf_protection: declared(edge.ssrf_protection),
  timeout_ms: declared(edge.timeout_ms),
  connect_timeout_ms: declared(edge.connect_timeout_ms),
  max_retries: declared(edge.max_retries),
  retry_on: declared(edge.retry_on).refine((r) => new Set(r).size === r.length, 'Must not repeat a value'),
  forward_host_header: declared(edge.forward_host_header),
  custom_headers: customHeaders,
  tags: tagsField(),
};

const urlOrParts = (body: { url?: string; scheme?: unknown; host?: unknown; port?: unknown; path_prefix?: unknown }, ctx: z.RefinementCtx) => {
  // Refinements may run beside a failed field check: an unparsable url has its own issue already.
  if (body.url === undefined || !URL.canParse(body.url)) return;
  for (const part of ['scheme', 'host', 'port', 'path_prefix'] as const) {
    if (body[part] !== undefined) ctx.addIssue({ code: 'custom', path: [part], message: 'Give either url or scheme, host, port and path_prefix' });
  }
  const parsed = new URL(body.url);
  if (parsed.username || parsed.password) ctx.addIssue({ code: 'custom', path: ['url'], message: 'Must not carry credentials (use custom_headers)' });
  if (parsed.search || parsed.hash || body.url.includes('?') || body.url.includes('#')) ctx.addIssue({ code: 'custom', path: ['url'], message: 'Must not carry a query or fragment' });
};

const originShape = z.strictObject(originFields).partial();

function createChecks(body: z.output<typeof originShape>, ctx: z.RefinementCtx): void {
  urlOrParts(body, ctx);
  if (body.url === undefined && body.host === undefined) ctx.addIssue({ code: 'custom', path: ['host'], message: 'Required (or give url)' });
}

/** Create (distribution-scoped): name and host (or url) required. */
const originExample: z.input<typeof originShape> & { name: string } = {
  name: 'Media storage', scheme: 'https', host: 'media.example.com', port: 443, path_prefix: '/vod',
  health_check_url: 'https://media.example.com/healthz', health_check_interval_seconds: 30, timeout_ms: 15000, max_retries: 2,
  retry_on: ['connect_failure', '5xx'], custom_headers: { 'X-Origin-Auth': 'replace-with-your-secret' }, tags: ['vod'],
};
export const createOriginBody = withExample(originShape.extend({ name: nameField() }).superRefine(createChecks), originExample);
/** Create (top level): the same, and optionally the endpoint it joins. */
export const createTopLevelOriginBody = withExample(originShape.extend({
  name: nameField(),
  distribution_id: uuid().optional().describe('The endpoint the origin joins; left out, it joins the first endpoint or route that uses it'),
}).superRefine(createChecks), originExample);
export type OriginInput = z.output<typeof originShape> & { distribution_id?: string };

/** Update: every field optional; health_check_url may be null. */
export const updateOriginBody = withExample(originShape.superRefine(urlOrParts), { timeout_ms: 20000, max_retries: 3, retry_on: ['connect_failure', '5xx', '429'] });
