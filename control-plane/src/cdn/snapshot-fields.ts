// One table of fields per configuration resource (issue 21 item 3): which
// column of a cdn_* table becomes which member of the resource's snapshot
// entry (shared/src/config/snapshot.ts), in the entry's order, and how the
// column is written back from an entry. The configuration compiler
// (cdn-config) selects the columns and builds the entries from it; the
// rollback's restore (snapshot-restore.ts) upserts the columns from it. A
// column the edge does not see is listed in `kept` (a rollback sets it on the
// rows it re-creates and leaves the others') or in `unpublished` (neither
// published nor restored: bookkeeping, and state the platform observes or
// issues rather than configuration); snapshot-fields.test.ts checks that every
// column of every table is one of the three. Adding a field to a resource is
// its record, its migration, one line here and the edge code that uses it.
//
// Entry members with no column (an endpoint's children, unsealed secrets, a
// drain's credentials merged into its destination) are computed by the
// compiler and the restore and passed in by name.
import type { Columns } from '../db/bulk.ts';

type Row = Record<string, any>;

export interface Field {
  /** The member of the snapshot entry; null: a column the entry does not hold (a parent link, a column the compile reads to decide). */
  readonly key: string | null;
  /** The column; none for a member computed by the compiler and the restore. */
  readonly column?: string;
  /** The column's SQL type in the restore's recordset. */
  readonly type?: string;
  /** The member from the row (default: the column's value). */
  readonly toEntry?: (row: Row) => unknown;
  /** The column from the entry and, for an endpoint's child, the endpoint's entry (default: the member's value). */
  readonly fromEntry?: (entry: Row, endpoint: Row) => unknown;
}

export interface ResourceFields {
  readonly table: string;
  /** In the entry's order. */
  readonly fields: readonly Field[];
  /** Columns the edge does not see that a rollback sets on the rows it re-creates (SQL values) and leaves alone on the others. */
  readonly kept: Readonly<Record<string, string>>;
  /** Columns neither published nor restored. */
  readonly unpublished: readonly string[];
}

/** The columns every configuration table keeps for itself. */
const BOOKKEEPING = ['created_at', 'updated_at', 'version'];
/** The list routes' full-text search column (migration 0020), generated from the others. */
const SEARCHED = [...BOOKKEEPING, 'search_document'];

/** A column that is the entry's member of the same name. */
const column = (name: string, type: string, options: Pick<Field, 'toEntry' | 'fromEntry'> = {}): Field => ({ key: name, column: name, type, ...options });
/** A column the entry does not hold. */
const hidden = (name: string, type: string, fromEntry?: Field['fromEntry']): Field => ({ key: null, column: name, type, fromEntry });
/** The column naming the endpoint an endpoint's child belongs to. */
const endpointLink = (name: string) => hidden(name, 'uuid', (_entry, endpoint) => endpoint.id);
/** A member with no column of its own. */
const computed = (key: string): Field => ({ key });

/** The named members of a JSON object, in that order. */
const pick = (keys: readonly string[]) => (value: Row) => Object.fromEntries(keys.map((k) => [k, value[k]]));
/** The named list members of a JSON object, in that order, empty when absent. */
const lists = (keys: readonly string[]) => (value: Row) => Object.fromEntries(keys.map((k) => [k, value[k] ?? []]));

const tlsConfig = pick(['minimum_protocol_version', 'cipher_policy', 'http_to_https_redirect']);
const compression = pick(['enabled', 'algorithms', 'min_size_bytes']);
const geoRestriction = pick(['enabled', 'policy', 'countries', 'action']);
const errorPage = pick(['error_code', 'response_page_path', 'response_code', 'ttl_seconds']);
const routeMatch = lists(['hosts', 'paths', 'methods']);
const redirectRule = pick(['type', 'status_code', 'match_path', 'redirect_to']);
const cacheMatch = lists(['paths', 'methods', 'content_types']);
const cacheKey = lists(['include_headers', 'include_query_params', 'exclude_query_params', 'include_cookies']);
const bypass = lists(['if_cookie_present', 'if_header_present', 'if_query_param_present']);

const defaultPort = (scheme: string) => (scheme === 'http' ? 80 : 443);

export const endpointFields: ResourceFields = {
  table: 'cdn_endpoint',
  fields: [
    column('id', 'uuid'),
    column('name', 'varchar'),
    column('hostname', 'varchar'),
    // A disabled endpoint is published (its hostname answers 403); an enabled one is restored deploying (the channel makes it active).
    { key: 'enabled', column: 'status', type: 'text', toEntry: (r) => r.status !== 'disabled', fromEntry: (e) => (e.enabled ? 'deploying' : 'disabled') },
    column('default_origin_id', 'uuid'),
    column('http_version', 'text'),
    column('ipv6_enabled', 'boolean'),
    column('response_headers_policy_id', 'uuid'),
    column('tls_config', 'jsonb', { toEntry: (r) => tlsConfig(r.tls_config) }),
    column('compression', 'jsonb', { toEntry: (r) => compression(r.compression) }),
    column('geo_restriction', 'jsonb', { toEntry: (r) => geoRestriction(r.geo_restriction) }),
    column('custom_error_pages', 'jsonb', { toEntry: (r) => (r.custom_error_pages as Row[]).map(errorPage) }),
    column('shield_region', 'varchar'),
    computed('custom_domains'),
    computed('origins'),
    computed('routes'),
    computed('cache_rules'),
    computed('signing_keys'),
    computed('ip_rules'),
    column('ip_default_action', 'text'),
    // The entry lists signing keys only with token authentication on.
    hidden('token_auth_enabled', 'boolean', (e) => e.signing_keys.length > 0),
  ],
  kept: { tags: `'[]'::jsonb` },
  // status_reason: why the channel set the endpoint's status (observed, not configured).
  unpublished: [...SEARCHED, 'status_reason'],
};

export const originFields: ResourceFields = {
  table: 'cdn_origin',
  fields: [
    column('id', 'uuid'),
    endpointLink('distribution_id'),
    column('name', 'varchar'),
    column('scheme', 'text'),
    column('host', 'varchar'),
    column('port', 'int', { fromEntry: (o) => o.port ?? defaultPort(o.scheme) }),
    column('path_prefix', 'varchar'),
    column('enabled', 'boolean'),
    column('health_check_url', 'varchar'),
    column('health_check_interval_seconds', 'int'),
    column('verify_tls', 'boolean'),
    column('allow_private_network', 'boolean'),
    column('ssrf_protection', 'boolean'),
    column('timeout_ms', 'int'),
    column('connect_timeout_ms', 'int'),
    column('max_retries', 'smallint'),
    column('retry_on', 'jsonb'),
    column('forward_host_header', 'boolean'),
    column('custom_headers', 'jsonb'),
  ],
  // health_status: what the edge nodes measured (the channel writes it).
  kept: { health_status: `'unknown'`, tags: `'[]'::jsonb` },
  unpublished: SEARCHED,
};

export const routeFields: ResourceFields = {
  table: 'cdn_route',
  fields: [
    column('id', 'uuid'),
    endpointLink('distribution_id'),
    column('name', 'varchar'),
    column('origin_id', 'uuid'),
    column('enabled', 'boolean'),
    column('priority', 'int'),
    column('match', 'jsonb', { toEntry: (r) => routeMatch(r.match) }),
    column('strip_prefix', 'varchar'),
    column('response_headers_policy_id', 'uuid'),
    column('redirect_rules', 'jsonb', { toEntry: (r) => (r.redirect_rules as Row[]).map(redirectRule) }),
    column('compression_enabled', 'boolean'),
  ],
  kept: {},
  unpublished: SEARCHED,
};

export const cacheRuleFields: ResourceFields = {
  table: 'cdn_cache_rule',
  fields: [
    column('id', 'uuid'),
    endpointLink('distribution_id'),
    column('name', 'varchar'),
    column('enabled', 'boolean'),
    column('priority', 'int'),
    column('match', 'jsonb', { toEntry: (c) => cacheMatch(c.match) }),
    column('ttl_seconds', 'int'),
    column('browser_ttl_seconds', 'int'),
    column('cache_key', 'jsonb', { toEntry: (c) => cacheKey(c.cache_key) }),
    column('bypass', 'jsonb', { toEntry: (c) => bypass(c.bypass) }),
    column('stale_while_revalidate_seconds', 'int'),
    column('stale_if_error_seconds', 'int'),
    column('negative_ttl_seconds', 'int'),
    column('cache_status_header', 'boolean'),
  ],
  kept: {},
  unpublished: SEARCHED,
};

export const signingKeyFields: ResourceFields = {
  table: 'cdn_signing_key',
  fields: [
    column('id', 'uuid'),
    endpointLink('endpoint_id'),
    column('algorithm', 'text'),
    // Only active keys are published, so a restored key is active.
    hidden('status', 'text', () => 'active'),
    // The current secret first, then the retired ones in their grace period: unsealed by the compiler, sealed again by the restore.
    computed('secrets'),
    hidden('secret_sealed', 'text'),
    hidden('retired_secrets', 'jsonb'),
    column('token_param', 'varchar'),
    column('expires_param', 'varchar'),
    column('ip_binding_enabled', 'boolean'),
  ],
  kept: { name: `'Restored key'`, rotated_at: 'null' },
  unpublished: BOOKKEEPING,
};

export const ipRuleFields: ResourceFields = {
  table: 'cdn_ip_rule',
  fields: [
    column('id', 'uuid'),
    endpointLink('endpoint_id'),
    column('action', 'text'),
    column('cidr', 'varchar'),
    column('priority', 'int'),
  ],
  kept: { description: 'null' },
  unpublished: BOOKKEEPING,
};

/**
 * Custom domains are published by hostname with their certificate and
 * unsealed key; the restore matches them by hostname and writes them by hand
 * (snapshot-restore.ts restoreDomains): certificates are issued and renewed,
 * not configured, so a rollback keeps a domain's current one.
 */
export const customDomainFields: ResourceFields = {
  table: 'cdn_custom_domain',
  fields: [
    hidden('id', 'uuid'),
    endpointLink('endpoint_id'),
    column('hostname', 'varchar'),
    column('certificate_pem', 'text'),
    computed('private_key_pem'),
    hidden('private_key_sealed', 'text'),
  ],
  kept: {},
  unpublished: [
    ...BOOKKEEPING, 'certificate_source', 'certificate_status', 'certificate_expires_at', 'certificate_issuer', 'certificate_fingerprint',
    'previous_certificate_pem', 'previous_private_key_sealed', 'previous_retires_at', 'dns_validation', 'validation_error', 'acme_order',
  ],
};

export const headerPolicyFields: ResourceFields = {
  table: 'cdn_response_headers_policy',
  fields: [
    column('id', 'uuid'),
    column('name', 'varchar'),
    column('cors', 'jsonb'),
    column('security_headers', 'jsonb'),
    column('custom_response_headers', 'jsonb'),
    column('custom_request_headers', 'jsonb'),
    column('remove_response_headers', 'jsonb'),
    column('remove_request_headers', 'jsonb'),
  ],
  kept: { description: `''` },
  unpublished: SEARCHED,
};

export const logDrainFields: ResourceFields = {
  table: 'cdn_log_drain',
  fields: [
    column('id', 'uuid'),
    column('name', 'varchar'),
    column('destination_type', 'text'),
    // Published with its credentials merged in (unsealed); restored split and sealed again.
    column('destination_config', 'jsonb'),
    hidden('destination_secrets_sealed', 'text'),
    column('log_format', 'text'),
    column('fields', 'jsonb'),
    column('endpoint_ids', 'jsonb'),
    // The edge needs to know only whether to deliver: `error` is observed delivery state, not configuration.
    column('status', 'text', { toEntry: (d) => (d.status === 'paused' ? 'paused' : 'active') }),
  ],
  // last_error and records_dropped: what the agents reported of its delivery.
  kept: { last_error: 'null' },
  unpublished: [...SEARCHED, 'records_dropped'],
};

/** Every configuration table's fields (the tables whose writes bump the configuration revision, migration 0021). */
export const configurationTables: readonly ResourceFields[] = [
  endpointFields, originFields, routeFields, cacheRuleFields, signingKeyFields, ipRuleFields, customDomainFields, headerPolicyFields, logDrainFields,
];

/** A JSON value with every object's keys sorted (free-form maps that did not come from jsonb: a drain's destination with its credentials). */
export function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value && typeof value === 'object') return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortedKeys((value as Row)[k])]));
  return value;
}

/** The columns a compile reads: `select <this> from <table>`. */
/** The columns of a resource the edge receives (a change to any other publishes nothing). */
export const publishedColumns = (resource: ResourceFields): ReadonlySet<string> => new Set(resource.fields.flatMap((f) => (f.column ? [f.column] : [])));

export const selectList = (resource: ResourceFields): string => resource.fields.flatMap((f) => (f.column ? [f.column] : [])).join(', ');

/** The snapshot entry of a row: each member from its column, or from `computed` by name (which wins). */
export function toEntry(resource: ResourceFields, row: Row, computed: Row = {}): Row {
  const entry: Row = {};
  for (const f of resource.fields) {
    if (f.key === null) continue;
    entry[f.key] = f.key in computed ? computed[f.key] : f.toEntry ? f.toEntry(row) : row[f.column!];
  }
  return entry;
}

/** The columns a restore writes, with their SQL types. */
export function restoredColumns(resource: ResourceFields): Columns {
  return Object.fromEntries(resource.fields.flatMap((f) => (f.column ? [[f.column, f.type!]] : [])));
}

/** The row of an entry (of a child of `endpoint`): each column from the entry, or from `computed` by column name (which wins). */
export function toRow(resource: ResourceFields, entry: Row, endpoint: Row = {}, computed: Row = {}): Row {
  const row: Row = {};
  for (const f of resource.fields) {
    if (!f.column) continue;
    row[f.column] = f.column in computed ? computed[f.column] : f.fromEntry ? f.fromEntry(entry, endpoint) : entry[f.key ?? f.column];
  }
  return row;
}
