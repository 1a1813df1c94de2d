// The Endpoint (distribution) record of document 3 §2 and its request bodies.
// Defaults and value sets follow the edge snapshot (shared/src/config/snapshot.ts).
import { z } from 'zod';
import { countryCodeField } from '../accounts/index.ts';
import { versioned } from '../http/route.ts';
import { orNull, timestamp, uuid, withExample } from '../http/schemas.ts';
import { ENDPOINT_STATUSES, HTTP_VERSIONS, IP_DEFAULT_ACTIONS, type Compression, type GeoRestriction, type TlsConfig } from './cdn.entities.ts';
import { endpointSnapshot, MAX_COMPRESSION_MIN_SIZE } from '../../../shared/src/config/snapshot.ts';
import { declared, nameField, tagsField } from './fields.ts';

export const TLS_VERSIONS = ['TLSv1', 'TLSv1.1', 'TLSv1.2', 'TLSv1.3'] as const;
export const CIPHER_POLICIES = ['compatible', 'recommended', 'modern'] as const;
export const COMPRESSION_ALGORITHMS = ['br', 'gzip'] as const;
export const GEO_POLICIES = ['allowlist', 'blocklist'] as const;
export const GEO_ACTIONS = ['block'] as const;
export const MAX_ERROR_PAGES = 50;
export { MAX_COMPRESSION_MIN_SIZE };

const edge = endpointSnapshot.shape;
const edgeCompression = declared(edge.compression).shape;
const edgeGeo = declared(edge.geo_restriction).shape;
const edgeErrorPage = declared(edge.custom_error_pages).element.shape;
/** The snapshot's default of a field: what a created endpoint gets. */
const edgeDefault = <T>(field: z.ZodType<T>): T => field.parse(undefined);

/** What the edge enforces on a viewer's request, and in what order (DESIGN.md §8); quoted by the operations that configure each step. */
export const EDGE_REQUEST_ORDER = 'The edge checks every request to an endpoint before its cache and its origin, in this order: 1. IP access rules '
  + '(with ip_default_action), 2. geo_restriction, 3. signed URLs (token_auth_enabled, the signing keys), 4. redirects '
  + '(tls_config.http_to_https_redirect, then the redirect_rules of the route the request matches). A refusal is one plain 403 whichever check made it '
  + '(the reason is in the edge\'s access log and its edge_policy_denials_total metric); a redirect is answered by the edge itself. The viewer\'s address '
  + 'is the connection\'s, or what a trusted proxy in front of the edge reports (the agent\'s TRUST_PROXY_HEADER and TRUSTED_PROXY_CIDRS).';

/** What the edge does to every answer of an endpoint, and in what order (DESIGN.md §8); quoted by the operations that configure each step. */
export const EDGE_RESPONSE_ORDER = 'The edge shapes every answer of an endpoint (from its cache, from the origin, and its own refusals and redirects) in this '
  + 'order: 1. custom_error_pages: an answer whose status is a listed error_code is replaced by the page fetched from response_page_path on the '
  + 'endpoint\'s default origin, with response_code when given (else the original status); the page is kept for ttl_seconds and purges reach it; '
  + 'a page the edge cannot fetch (an error status, over 1 MiB, no answer within 5 s) leaves the original answer. 2. compression (a route\'s '
  + 'compression_enabled, when not null, replaces compression.enabled): a 200 of a compressible type (text/* but event streams, JSON, XML, '
  + 'JavaScript, HLS and DASH manifests, SVG, WebAssembly, uncompressed fonts, icons) of at least min_size_bytes, not already encoded by the origin '
  + 'and without Cache-Control: no-transform, private or no-store or a Set-Cookie (answers that may hold a secret are never compressed: BREACH), is sent br or gzip as the viewer\'s Accept-Encoding prefers by q-value (the order of algorithms '
  + 'breaks ties), with Vary: Accept-Encoding and the ETag suffixed -br or -gzip; each encoded variant of a cached object is made once and cached '
  + 'beside it; byte ranges are always served uncompressed. 3. the response headers policy (a route\'s response_headers_policy_id, when set, '
  + 'replaces the endpoint\'s): remove_response_headers, then the enabled security headers, then custom_response_headers (override true '
  + 'replaces the origin\'s field, false only fills a missing one), then CORS. The policy\'s custom_request_headers and remove_request_headers '
  + 'change what is forwarded to the origin, and the cache key is made of the fields as forwarded. A CORS preflight (OPTIONS with Origin and '
  + 'Access-Control-Request-Method) to a route whose policy has CORS enabled is answered by the edge and never forwarded.';

export const DEFAULT_TLS: TlsConfig = edgeDefault(edge.tls_config);
export const DEFAULT_COMPRESSION: Compression = edgeDefault(edge.compression);
export const DEFAULT_GEO: GeoRestriction = edgeDefault(edge.geo_restriction);

const tlsRecord = z.object({ minimum_protocol_version: z.string(), cipher_policy: z.string(), http_to_https_redirect: z.boolean() });
const compressionRecord = z.object({ enabled: z.boolean(), algorithms: z.array(z.string()), min_size_bytes: z.number().int() });
const geoRecord = z.object({ enabled: z.boolean(), policy: z.string(), countries: z.array(z.string()), action: z.string() });
const errorPageRecord = z.object({ error_code: z.number().int(), response_page_path: z.string(), response_code: z.number().int().nullable(), ttl_seconds: z.number().int() });

export const endpointRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  default_origin_id: z.uuid(),
  hostname: z.string().describe('Assigned by the CDN (`<label>.<CDN_DOMAIN>`); read-only'),
  status: z.enum(ENDPOINT_STATUSES),
  status_reason: orNull(z.string()).describe('With status error: the edge node that refused the endpoint\'s latest configuration change and its reason (the endpoint is error while an online node refuses it; deploying or active again once it applied it or went offline); null otherwise'),
  http_version: declared(edge.http_version),
  ipv6_enabled: declared(edge.ipv6_enabled),
  response_headers_policy_id: orNull(z.uuid()),
  tls_config: tlsRecord,
  compression: compressionRecord,
  geo_restriction: geoRecord,
  custom_error_pages: z.array(errorPageRecord),
  shield_region: orNull(z.string()),
  tags: z.array(z.string()),
  token_auth_enabled: z.boolean().describe('Viewers need a URL signed with one of the endpoint\'s signing keys'),
  ip_default_action: declared(edge.ip_default_action).describe('What the edge does with a viewer no IP access rule holds'),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const endpointResource = versioned(endpointRecord);

const tlsInput = z.strictObject({
  minimum_protocol_version: z.enum(TLS_VERSIONS),
  cipher_policy: z.enum(CIPHER_POLICIES),
  http_to_https_redirect: z.boolean(),
}).partial();
const compressionInput = z.strictObject({
  enabled: declared(edgeCompression.enabled),
  algorithms: declared(edgeCompression.algorithms).min(1).max(2).refine((a) => new Set(a).size === a.length, 'Must not repeat an algorithm'),
  min_size_bytes: declared(edgeCompression.min_size_bytes),
}).partial();
const geoInput = z.strictObject({
  enabled: declared(edgeGeo.enabled),
  policy: declared(edgeGeo.policy),
  countries: z.array(countryCodeField()).max(250),
  action: declared(edgeGeo.action),
}).partial();
const errorPageInput = z.strictObject({
  error_code: edgeErrorPage.error_code,
  response_page_path: z.string().max(2048).regex(/^\/[^\s]*$/, 'Must be an absolute path such as /errors/404.html'),
  response_code: edgeErrorPage.response_code,
  ttl_seconds: edgeErrorPage.ttl_seconds,
});
const shieldRegion = z.string().regex(/^[a-z0-9][a-z0-9-]{0,63}$/, 'Must be a shield region id such as eu-west').nullable();

const endpointFields = {
  name: nameField(),
  default_origin_id: uuid().describe('An enabled origin that belongs to no other endpoint; it joins this one'),
  http_version: z.enum(HTTP_VERSIONS),
  ipv6_enabled: z.boolean(),
  response_headers_policy_id: uuid().nullable().describe('The response headers policy of every answer of the endpoint, unless the route the request '
    + 'matches names its own (which then replaces it); must name an existing policy (422)'),
  tls_config: tlsInput.describe('Members sent change, others keep their values (defaults: TLSv1.2, recommended, no redirect). http_to_https_redirect: the edge '
    + 'answers a viewer that did not come over TLS with a redirect to the same URL on https (301 for GET and HEAD, 308 otherwise)'),
  compression: compressionInput.describe('br and gzip at the edge, chosen by the viewer\'s Accept-Encoding q-values (algorithms order breaks ties); only '
    + '200 answers of a compressible type of at least min_size_bytes that the origin did not encode; each encoded variant of a cached object is made '
    + 'once and cached beside it; a route\'s compression_enabled overrides enabled. Members sent change, others keep their values (defaults: off, br and '
    + 'gzip, 1024 bytes)'),
  geo_restriction: geoInput.describe('Decided at the edge on the viewer address\'s country (GeoLite2 country ranges); allowlist serves only the listed '
    + 'countries, blocklist refuses them (403). Addresses with no country (loopback, private networks) are never refused. Members sent change, others '
    + 'keep their values'),
  custom_error_pages: z.array(errorPageInput).max(MAX_ERROR_PAGES)
    .refine((pages) => new Set(pages.map((p) => p.error_code)).size === pages.length, 'Must not name an error_code twice')
    .describe('An answer with a listed error_code (from the origin, the cache or the edge itself) is replaced by the page at response_page_path on the '
      + 'default origin, fetched by the edge and kept for ttl_seconds (default 10; purging the path drops it), with response_code when given (null keeps '
      + 'the status); when the page cannot be fetched the original answer goes out. A path the edge could not fetch (an encoded slash, "//host") is 422'),
  shield_region: shieldRegion,
  tags: tagsField(),
  token_auth_enabled: z.boolean().describe('Require signed URLs; needs an active signing key (422 otherwise)'),
  ip_default_action: z.enum(IP_DEFAULT_ACTIONS).describe('allow (default): viewers no IP access rule holds are served; deny: they are refused with 403 '
    + '(default deny). deny needs an allow or challenge rule first (422 otherwise: it would refuse every viewer)'),
};

export const createEndpointBody = withExample(z.strictObject({
  ...endpointFields,
  http_version: endpointFields.http_version.default(edgeDefault(edge.http_version)),
  ipv6_enabled: endpointFields.ipv6_enabled.default(edgeDefault(edge.ipv6_enabled)),
  response_headers_policy_id: endpointFields.response_headers_policy_id.default(null),
  tls_config: endpointFields.tls_config.default({}),
  compression: endpointFields.compression.default({}),
  geo_restriction: endpointFields.geo_restriction.default({}),
  custom_error_pages: endpointFields.custom_error_pages.default([]),
  shield_region: endpointFields.shield_region.default(edgeDefault(edge.shield_region)),
  tags: endpointFields.tags.default([]),
  token_auth_enabled: endpointFields.token_auth_enabled.default(false),
  ip_default_action: endpointFields.ip_default_action.default(edgeDefault(edge.ip_default_action)),
}), {
  name: 'Video on demand', default_origin_id: '3d6f0a2e-8b4c-4e1f-9a7d-5c2b8e0f6a13', http_version: 'http2',
  tls_config: { minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended', http_to_https_redirect: true },
  compression: { enabled: true, algorithms: ['br', 'gzip'], min_size_bytes: 1024 },
  custom_error_pages: [{ error_code: 404, response_page_path: '/errors/404.html', ttl_seconds: 60 }],
  tags: ['vod', 'production'],
});
export type CreateEndpointInput = z.output<typeof createEndpointBody>;

export const updateEndpointBody = withExample(z.strictObject(endpointFields).partial(),
  { tls_config: { http_to_https_redirect: true }, geo_restriction: { enabled: true, policy: 'blocklist', countries: ['KP'] }, tags: ['vod', 'production'] });
export type UpdateEndpointInput = z.output<typeof updateEndpointBody>;

