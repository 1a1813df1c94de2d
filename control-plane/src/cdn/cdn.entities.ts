// The working configuration of the CDN (document 3 §2): endpoints
// (distributions) with their origins, routes and cache rules. Field names are
// the API's and the edge snapshot's (shared/src/config/snapshot.ts), so the
// control-channel issue compiles rows to snapshots without renaming. Nested
// objects (match, cache_key, tls_config ...) are jsonb in the snapshot's shape.
import { defineEntity, p } from '@mikro-orm/core';

export const ENDPOINT_STATUSES = ['deploying', 'active', 'disabled', 'error'] as const;
export type EndpointStatus = (typeof ENDPOINT_STATUSES)[number];
export const HTTP_VERSIONS = ['http1.1', 'http2', 'http2and3'] as const;
export const ORIGIN_SCHEMES = ['http', 'https'] as const;
export const HEALTH_STATUSES = ['healthy', 'degraded', 'unhealthy', 'unknown'] as const;
export type HealthStatus = (typeof HEALTH_STATUSES)[number];
export const RETRY_ON = ['connect_failure', '5xx', '429', '408'] as const;
export const IP_DEFAULT_ACTIONS = ['allow', 'deny'] as const;

export interface TlsConfig { minimum_protocol_version: string; cipher_policy: string; http_to_https_redirect: boolean }
export interface Compression { enabled: boolean; algorithms: string[]; min_size_bytes: number }
export interface GeoRestriction { enabled: boolean; policy: string; countries: string[]; action: string }
export interface CustomErrorPage { error_code: number; response_page_path: string; response_code: number | null; ttl_seconds: number }
export interface RouteMatch { hosts: string[]; paths: string[]; methods: string[] }
export interface RedirectRule { type: string; status_code: number; match_path: string; redirect_to: string }
export interface CacheRuleMatch { paths: string[]; methods: string[]; content_types: string[] }
export interface CacheKey { include_headers: string[]; include_query_params: string[]; exclude_query_params: string[]; include_cookies: string[] }
export interface CacheBypass { if_cookie_present: string[]; if_header_present: string[]; if_query_param_present: string[] }

/**
 * The full-text document of a resource's `q`: its name, each extra column
 * whole and split into its words (so `media.example.com`, `media` and
 * `example` all find a host), and its tags. The `simple` configuration: names
 * and hosts are not a language to stem. Kept in a stored generated column,
 * `search_document`, with a GIN index on it (migration 0020; before, the
 * index was on this expression, migration 0012): the list matches the
 * column, so a row costs a column read whichever plan PostgreSQL picks (a
 * plan walking the created_at index recomputed the expression on every row
 * it passed, ~30 µs a row).
 */
export function searchDocument(columns: readonly string[], tags: boolean): string {
  const text = ['name', ...columns].map((c) => `${c} || ' ' || regexp_replace(${c}, '[^[:alnum:]]+', ' ', 'g')`).join(` || ' ' || `);
  const words = `to_tsvector('simple'::regconfig, ${text})`;
  return tags ? `(${words} || jsonb_to_tsvector('simple'::regconfig, tags, '["string"]'::jsonb))` : `(${words})`;
}

/** The column `q` matches (listResources): the stored search document. */
export const SEARCH_DOCUMENT = 'search_document';

/** The `search_document` property: written by PostgreSQL from the row, never by the ORM, never loaded or shown. */
export const searchDocumentProperty = (columns: readonly string[], tags: boolean) =>
  p.string().columnType('tsvector').generated(`${searchDocument(columns, tags)} stored`).nullable().lazy().hidden();

/** The GIN index of a table's search document. */
export const searchIndex = (table: string) =>
  ({ name: `${table}_search_idx`, expression: `create index ${table}_search_idx on ${table} using gin (${SEARCH_DOCUMENT})` });

/** created_at, updated_at and the version behind ETag/If-Match, as every CDN table has them. */
export const timestamps = {
  created_at: p.datetime().onCreate(() => new Date()),
  updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  version: p.integer().version(),
};

export const EndpointSchema = defineEntity({
  name: 'Endpoint',
  tableName: 'cdn_endpoint',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    // Not a foreign key: an endpoint and its default origin refer to each other (the origin's distribution);
    // the service keeps it pointing at an origin of the endpoint, and origin deletion refuses while it does.
    default_origin_id: p.uuid(),
    hostname: p.string().length(253).unique('cdn_endpoint_hostname_key'),
    status: p.enum(ENDPOINT_STATUSES),
    // Why the status is `error` (the edge node that refused the endpoint's latest change, and its reason); null otherwise.
    status_reason: p.text().nullable(),
    http_version: p.enum(HTTP_VERSIONS),
    ipv6_enabled: p.boolean(),
    response_headers_policy_id: p.uuid().nullable(),
    tls_config: p.json<TlsConfig>(),
    compression: p.json<Compression>(),
    geo_restriction: p.json<GeoRestriction>(),
    custom_error_pages: p.json<CustomErrorPage[]>(),
    shield_region: p.string().length(64).nullable(),
    tags: p.json<string[]>(),
    // Signed URLs required (document 3 §4.8; migration 0014). Needs an active signing key.
    token_auth_enabled: p.boolean().default(false),
    // What the edge does with viewers no IP access rule holds (migration 0031).
    ip_default_action: p.enum(IP_DEFAULT_ACTIONS).default('allow'),
    search_document: searchDocumentProperty(['hostname'], true),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_endpoint_created_at_idx', properties: ['created_at', 'id'] },
    // The list's sorts (migration 0018).
    { name: 'cdn_endpoint_updated_at_idx', properties: ['updated_at', 'id'] },
    { name: 'cdn_endpoint_name_idx', properties: ['name', 'id'] },
    searchIndex('cdn_endpoint'),
  ],
});
export class Endpoint extends EndpointSchema.class {}
EndpointSchema.setClass(Endpoint);

export const OriginSchema = defineEntity({
  name: 'Origin',
  tableName: 'cdn_origin',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    // null until an endpoint uses it (an endpoint needs an origin to exist first).
    distribution: () => p.manyToOne(Endpoint).nullable().deleteRule('cascade'),
    name: p.string().length(100),
    scheme: p.enum(ORIGIN_SCHEMES),
    host: p.string().length(253),
    port: p.integer(),
    path_prefix: p.string().length(2048),
    enabled: p.boolean(),
    health_status: p.enum(HEALTH_STATUSES),
    health_check_url: p.string().length(2048).nullable(),
    health_check_interval_seconds: p.integer(),
    verify_tls: p.boolean(),
    allow_private_network: p.boolean(),
    ssrf_protection: p.boolean(),
    timeout_ms: p.integer(),
    connect_timeout_ms: p.integer(),
    max_retries: p.smallint(),
    retry_on: p.json<(typeof RETRY_ON)[number][]>(),
    forward_host_header: p.boolean(),
    // Values are sent to the origin by the edge, so they are kept; the API shows them masked.
    custom_headers: p.json<Record<string, string>>(),
    tags: p.json<string[]>(),
    search_document: searchDocumentProperty(['host'], true),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_origin_created_at_idx', properties: ['created_at', 'id'] },
    // The list's sorts (migration 0018).
    { name: 'cdn_origin_updated_at_idx', properties: ['updated_at', 'id'] },
    { name: 'cdn_origin_name_idx', properties: ['name', 'id'] },
    { name: 'cdn_origin_host_idx', properties: ['host', 'id'] },
    { name: 'cdn_origin_distribution_idx', properties: ['distribution', 'created_at'] },
    searchIndex('cdn_origin'),
  ],
});
export class Origin extends OriginSchema.class {}
OriginSchema.setClass(Origin);

export const RouteSchema = defineEntity({
  name: 'CdnRoute',
  tableName: 'cdn_route',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    distribution: () => p.manyToOne(Endpoint).deleteRule('cascade'),
    origin: () => p.manyToOne(Origin).deleteRule('restrict'),
    name: p.string().length(100),
    enabled: p.boolean(),
    priority: p.integer(),
    match: p.json<RouteMatch>(),
    strip_prefix: p.string().length(2048).nullable(),
    response_headers_policy_id: p.uuid().nullable(),
    redirect_rules: p.json<RedirectRule[]>(),
    compression_enabled: p.boolean().nullable(),
    search_document: searchDocumentProperty([], false),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_route_created_at_idx', properties: ['created_at', 'id'] },
    // The list's sorts (migration 0018).
    { name: 'cdn_route_updated_at_idx', properties: ['updated_at', 'id'] },
    { name: 'cdn_route_name_idx', properties: ['name', 'id'] },
    { name: 'cdn_route_priority_idx', properties: ['priority', 'id'] },
    { name: 'cdn_route_distribution_idx', properties: ['distribution', 'priority'] },
    { name: 'cdn_route_origin_idx', properties: ['origin'] },
    searchIndex('cdn_route'),
  ],
});
export class CdnRoute extends RouteSchema.class {}
RouteSchema.setClass(CdnRoute);

export const CacheRuleSchema = defineEntity({
  name: 'CacheRule',
  tableName: 'cdn_cache_rule',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    distribution: () => p.manyToOne(Endpoint).deleteRule('cascade'),
    name: p.string().length(100),
    enabled: p.boolean(),
    priority: p.integer(),
    match: p.json<CacheRuleMatch>(),
    ttl_seconds: p.integer(),
    browser_ttl_seconds: p.integer().nullable(),
    cache_key: p.json<CacheKey>(),
    bypass: p.json<CacheBypass>(),
    stale_while_revalidate_seconds: p.integer().nullable(),
    stale_if_error_seconds: p.integer().nullable(),
    // Error answers without explicit freshness are kept this long instead of ttl_seconds (migration 0040).
    negative_ttl_seconds: p.integer().default(10),
    cache_status_header: p.boolean(),
    search_document: searchDocumentProperty([], false),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_cache_rule_created_at_idx', properties: ['created_at', 'id'] },
    // The list's sorts (migration 0018).
    { name: 'cdn_cache_rule_updated_at_idx', properties: ['updated_at', 'id'] },
    { name: 'cdn_cache_rule_name_idx', properties: ['name', 'id'] },
    { name: 'cdn_cache_rule_priority_idx', properties: ['priority', 'id'] },
    { name: 'cdn_cache_rule_distribution_idx', properties: ['distribution', 'priority'] },
    searchIndex('cdn_cache_rule'),
  ],
});
export class CacheRule extends CacheRuleSchema.class {}
CacheRuleSchema.setClass(CacheRule);
