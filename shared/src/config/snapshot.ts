// The configuration snapshot the control plane publishes and edge agents apply.
// One schema for both sides: the control plane builds it from the database,
// the agent validates it when it arrives over the control stream or is read
// from --config-file. Field names follow the CDN API (document 3) so that an
// operator can read a snapshot next to the API records.
import { z } from 'zod';

const id = z.string().min(1);

/** Ten years: longer TTLs mean "forever" in practice and would overflow what agents count in. */
export const MAX_TTL_SECONDS = 315_360_000;
const seconds = () => z.number().int().min(0).max(MAX_TTL_SECONDS);
/** The largest compression.min_size_bytes: 10 MiB (answers larger than that are compressed anyway or not at all). */
export const MAX_COMPRESSION_MIN_SIZE = 10 * 1024 * 1024;
/** A custom error page is kept at most a year. */
const MAX_ERROR_PAGE_TTL_SECONDS = 31_536_000;

export const originSnapshot = z.object({
  id,
  name: z.string().default(''),
  scheme: z.enum(['http', 'https']).default('https'),
  host: z.string().min(1).max(253),
  port: z.number().int().min(1).max(65535).optional(),
  path_prefix: z.string().max(2048).default(''),
  enabled: z.boolean().default(true),
  health_check_url: z.string().nullable().default(null),
  // Seconds between health probes from each agent. The API admits 5..3600 (origin-record.ts); an agent
  // runs down to 1 s, for a configuration file of its own and the agent's tests.
  health_check_interval_seconds: z.number().int().min(1).max(3600).default(30),
  verify_tls: z.boolean().default(true),
  allow_private_network: z.boolean().default(false).describe(
    'Allow this origin to resolve to private-use addresses: loopback, RFC 1918, CGNAT (100.64.0.0/10) and IPv6 unique-local (fc00::/7). '
    + 'When false (the default), edge nodes refuse to connect to any address that is not globally routable, whatever ssrf_protection says.',
  ),
  ssrf_protection: z.boolean().default(true).describe(
    'Keep refusing link-local addresses (169.254.0.0/16 and fe80::/10, where cloud metadata services answer), known metadata addresses, '
    + 'multicast, broadcast, unspecified and reserved ranges even when allow_private_network is true. '
    + 'Setting it to false has an effect only together with allow_private_network: true; on its own it opens nothing.',
  ),
  timeout_ms: z.number().int().min(100).max(60000).default(30000),
  connect_timeout_ms: z.number().int().min(100).max(10000).default(5000),
  max_retries: z.number().int().min(0).max(5).default(2),
  retry_on: z.array(z.enum(['connect_failure', '5xx', '429', '408'])).max(4).default(['connect_failure', '5xx']),
  forward_host_header: z.boolean().default(true),
  custom_headers: z.record(z.string(), z.string()).default({}),
});

export const redirectRuleSnapshot = z.object({
  type: z.string().default('path'),
  status_code: z.number().int().min(300).max(399).default(301),
  match_path: z.string().default('/*'),
  redirect_to: z.string().default(''),
});

export const routeSnapshot = z.object({
  id,
  name: z.string().default(''),
  origin_id: id,
  enabled: z.boolean().default(true),
  priority: z.number().int().min(0).max(10000).default(100),
  match: z.object({
    hosts: z.array(z.string()).default([]),
    paths: z.array(z.string()).default([]),
    methods: z.array(z.string()).default([]),
  }).default({ hosts: [], paths: [], methods: [] }),
  strip_prefix: z.string().nullable().default(null),
  response_headers_policy_id: z.string().nullable().default(null),
  redirect_rules: z.array(redirectRuleSnapshot).default([]),
  compression_enabled: z.boolean().nullable().default(null),
});

export const cacheRuleSnapshot = z.object({
  id,
  name: z.string().default(''),
  enabled: z.boolean().default(true),
  priority: z.number().int().min(0).max(10000).default(100),
  match: z.object({
    paths: z.array(z.string()).default([]),
    methods: z.array(z.string()).default([]),
    content_types: z.array(z.string()).default([]),
  }).default({ paths: [], methods: [], content_types: [] }),
  ttl_seconds: seconds(),
  browser_ttl_seconds: seconds().nullable().default(null),
  cache_key: z.object({
    include_headers: z.array(z.string()).default([]),
    include_query_params: z.array(z.string()).default([]),
    exclude_query_params: z.array(z.string()).default([]),
    include_cookies: z.array(z.string()).default([]),
  }).default({ include_headers: [], include_query_params: [], exclude_query_params: [], include_cookies: [] }),
  bypass: z.object({
    if_cookie_present: z.array(z.string()).default([]),
    if_header_present: z.array(z.string()).default([]),
    if_query_param_present: z.array(z.string()).default([]),
  }).default({ if_cookie_present: [], if_header_present: [], if_query_param_present: [] }),
  stale_while_revalidate_seconds: seconds().nullable().default(null),
  stale_if_error_seconds: seconds().nullable().default(null),
  // Error answers (4xx, 5xx) without explicit freshness are kept this long instead of ttl_seconds (0: not cached).
  negative_ttl_seconds: seconds().default(10),
  cache_status_header: z.boolean().default(true),
});

export const signingKeySnapshot = z.object({
  id,
  algorithm: z.enum(['HMAC-SHA256', 'HMAC-SHA512']).default('HMAC-SHA256'),
  // The current secret first; older secrets carry the end of their grace period.
  secrets: z.array(z.object({ secret: z.string().min(32), valid_until: z.string().nullable().default(null) })).min(1),
  token_param: z.string().default('token'),
  expires_param: z.string().default('expires'),
  ip_binding_enabled: z.boolean().default(false),
});

export const ipRuleSnapshot = z.object({
  id,
  action: z.enum(['allow', 'block', 'challenge']),
  cidr: z.string(),
  priority: z.number().int().min(1).max(1000).default(100),
});

export const customDomainSnapshot = z.object({
  hostname: z.string().min(1).max(253),
  certificate_pem: z.string().nullable().default(null),
  private_key_pem: z.string().nullable().default(null),
});

export const endpointSnapshot = z.object({
  id,
  name: z.string().default(''),
  hostname: z.string().min(1),
  // A disabled endpoint stays in the snapshot so its hostname answers 403 rather than 421.
  enabled: z.boolean().default(true),
  default_origin_id: id,
  http_version: z.enum(['http1.1', 'http2', 'http2and3']).default('http2'),
  ipv6_enabled: z.boolean().default(true),
  response_headers_policy_id: z.string().nullable().default(null),
  tls_config: z.object({
    minimum_protocol_version: z.string().default('TLSv1.2'),
    cipher_policy: z.string().default('recommended'),
    http_to_https_redirect: z.boolean().default(false),
  }).default({ minimum_protocol_version: 'TLSv1.2', cipher_policy: 'recommended', http_to_https_redirect: false }),
  compression: z.object({
    enabled: z.boolean().default(false),
    algorithms: z.array(z.enum(['br', 'gzip'])).default(['br', 'gzip']),
    min_size_bytes: z.number().int().min(0).max(MAX_COMPRESSION_MIN_SIZE).default(1024),
  }).default({ enabled: false, algorithms: ['br', 'gzip'], min_size_bytes: 1024 }),
  geo_restriction: z.object({
    enabled: z.boolean().default(false),
    policy: z.enum(['allowlist', 'blocklist']).default('allowlist'),
    countries: z.array(z.string().length(2)).default([]),
    action: z.enum(['block']).default('block'),
  }).default({ enabled: false, policy: 'allowlist', countries: [], action: 'block' }),
  custom_error_pages: z.array(z.object({
    error_code: z.number().int().min(400).max(599),
    response_page_path: z.string(),
    response_code: z.number().int().min(100).max(599).nullable().default(null),
    ttl_seconds: z.number().int().min(0).max(MAX_ERROR_PAGE_TTL_SECONDS).default(10),
  })).default([]),
  shield_region: z.string().nullable().default(null),
  custom_domains: z.array(customDomainSnapshot).default([]),
  origins: z.array(originSnapshot).min(1),
  routes: z.array(routeSnapshot).default([]),
  cache_rules: z.array(cacheRuleSnapshot).default([]),
  signing_keys: z.array(signingKeySnapshot).default([]),
  ip_rules: z.array(ipRuleSnapshot).default([]),
  // With "deny", traffic matched by no allow rule is refused.
  ip_default_action: z.enum(['allow', 'deny']).default('allow'),
});

const headerEntry = z.object({ name: z.string().min(1).max(256), value: z.string(), override: z.boolean().default(true) });
const toggle = z.object({ enabled: z.boolean().default(false), override: z.boolean().default(true) });

export const responseHeadersPolicySnapshot = z.object({
  id,
  name: z.string().default(''),
  cors: z.object({
    enabled: z.boolean().default(false),
    allow_origins: z.array(z.string()).default(['*']),
    allow_methods: z.array(z.string()).default([]),
    allow_headers: z.array(z.string()).default([]),
    expose_headers: z.array(z.string()).default([]),
    allow_credentials: z.boolean().default(false),
    max_age_seconds: z.number().int().min(0).nullable().default(null),
    override_origin: z.boolean().default(true),
  }).partial().default({}),
  security_headers: z.object({
    strict_transport_security: toggle.extend({ max_age_seconds: z.number().int().min(0).default(31536000), include_subdomains: z.boolean().default(false), preload: z.boolean().default(false) }).optional(),
    content_security_policy: toggle.extend({ policy: z.string().default(''), report_only: z.boolean().default(false) }).optional(),
    x_content_type_options: toggle.optional(),
    x_frame_options: toggle.extend({ value: z.string().default('DENY') }).optional(),
    referrer_policy: toggle.extend({ value: z.string().default('strict-origin-when-cross-origin') }).optional(),
    permissions_policy: toggle.extend({ policy: z.string().default('') }).optional(),
    x_xss_protection: toggle.extend({ value: z.string().default('0') }).optional(),
  }).default({}),
  custom_response_headers: z.array(headerEntry).default([]),
  custom_request_headers: z.array(headerEntry).default([]),
  remove_response_headers: z.array(z.string().max(256)).default([]),
  remove_request_headers: z.array(z.string().max(256)).default([]),
});

export const logDrainSnapshot = z.object({
  id,
  name: z.string().default(''),
  destination_type: z.enum(['s3', 'datadog', 'elasticsearch', 'http', 'gcs']),
  destination_config: z.record(z.string(), z.unknown()),
  log_format: z.enum(['json', 'ndjson', 'w3c_extended']).default('ndjson'),
  fields: z.array(z.string()).default([]),
  // Empty means every endpoint.
  endpoint_ids: z.array(z.string()).default([]),
  status: z.enum(['active', 'paused', 'error']).default('active'),
});

export const configSnapshot = z.object({
  version: z.number().int().min(0),
  generated_at: z.string().default(() => new Date().toISOString()),
  endpoints: z.array(endpointSnapshot).default([]),
  response_headers_policies: z.array(responseHeadersPolicySnapshot).default([]),
  log_drains: z.array(logDrainSnapshot).default([]),
});

export type ConfigSnapshot = z.infer<typeof configSnapshot>;
export type EndpointSnapshot = z.infer<typeof endpointSnapshot>;
export type OriginSnapshot = z.infer<typeof originSnapshot>;
export type RouteSnapshot = z.infer<typeof routeSnapshot>;
export type CacheRuleSnapshot = z.infer<typeof cacheRuleSnapshot>;
export type SigningKeySnapshot = z.infer<typeof signingKeySnapshot>;
export type IpRuleSnapshot = z.infer<typeof ipRuleSnapshot>;
export type ResponseHeadersPolicySnapshot = z.infer<typeof responseHeadersPolicySnapshot>;
export type LogDrainSnapshot = z.infer<typeof logDrainSnapshot>;

/** Parses and fills defaults; throws a ZodError naming the bad field. */
export function parseConfigSnapshot(input: unknown): ConfigSnapshot {
  return configSnapshot.parse(input);
}
