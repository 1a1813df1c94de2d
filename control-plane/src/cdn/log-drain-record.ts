// The Log drain record of document 3 §2 and its request bodies. The
// destination_config members depend on destination_type (one strict schema
// per type); credential members (CREDENTIAL_MEMBERS) are sealed at rest and
// show as MASKED_VALUE in every reply and audit entry: the stored
// destination_config column holds exactly what replies show.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { lineText, orNull, timestamp, uuid, withExample } from '../http/schemas.ts';
import { DESTINATION_TYPES, DRAIN_STATUSES, LOG_FORMATS, type DestinationType } from './policies.entities.ts';
import { nameField, tokenField } from './fields.ts';
import { MASKED_VALUE } from './origin-record.ts';
import { LOG_FIELDS } from '../../../shared/src/logs/access-record.ts';
import { INDEX_PLACEHOLDERS } from '../../../shared/src/logs/elasticsearch.ts';

/**
 * Fields a drain can ship: the spec's samples and what the edge's access
 * record carries (shared/src/logs/access-record.ts), in their canonical order.
 */
export { LOG_FIELDS };
export const MAX_DRAIN_ENDPOINTS = 1000;
/**
 * Drains at most on the platform, and sending one endpoint's logs (those naming it and those for every endpoint):
 * each drain is a client, connections and a share of every agent worker's log buffer (LOG_DRAIN_BUFFER_BYTES), and
 * every answer of an endpoint is rendered once per drain of it.
 */
export const MAX_LOG_DRAINS = 100;
export const MAX_DRAINS_PER_ENDPOINT = 10;
export const MAX_DRAIN_HEADERS = 20;

/** Datadog intake sites (https://docs.datadoghq.com/getting_started/site/). */
export const DATADOG_SITES = ['datadoghq.com', 'us3.datadoghq.com', 'us5.datadoghq.com', 'datadoghq.eu', 'ap1.datadoghq.com', 'ap2.datadoghq.com', 'ddog-gov.com'] as const;

/** Members of destination_config that are credentials, per type: sealed at rest, never shown. */
export const CREDENTIAL_MEMBERS: Record<DestinationType, readonly string[]> = {
  s3: ['access_key_id', 'secret_access_key'],
  gcs: ['service_account_json'],
  datadog: ['api_key'],
  elasticsearch: ['password', 'api_key'],
  http: ['auth_header', 'headers'],
};
/**
 * Members that say where logs (and credentials) go, per type: a change of any of them moves the destination, and
 * then every credential must be sent in clear ("***" keeps a stored credential only for an unchanged destination).
 */
export const DESTINATION_MEMBERS: Record<DestinationType, readonly string[]> = {
  s3: ['bucket', 'region', 'endpoint_url'],
  gcs: ['bucket', 'endpoint_url'],
  datadog: ['site', 'url'],
  elasticsearch: ['url'],
  http: ['url'],
};
/** Members holding a URL the control plane checks (https, SSRF). */
export const URL_MEMBERS: Record<DestinationType, readonly string[]> = { s3: ['endpoint_url'], gcs: ['endpoint_url'], datadog: ['url'], elasticsearch: ['url'], http: ['url'] };

export const logDrainRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  destination_type: z.enum(DESTINATION_TYPES),
  destination_config: z.record(z.string(), z.unknown()).describe(`The destination's members; credentials show as "${MASKED_VALUE}"`),
  log_format: z.enum(LOG_FORMATS),
  fields: z.array(z.string()),
  endpoint_ids: z.array(z.uuid()).describe('The endpoints whose access logs the drain receives; empty: every endpoint'),
  status: z.enum(DRAIN_STATUSES).describe('paused by an administrator; error while an online edge node fails to deliver (last_error names the node and why); active otherwise'),
  last_error: orNull(z.string()),
  records_dropped: z.number().int().describe('Records the edge nodes dropped because the drain\'s buffer was full (or its destination refused a batch as such)'),
  created_at: timestamp(),
  updated_at: timestamp(),
});
export const logDrainResource = versioned(logDrainRecord);

// ---- destination_config, per destination_type ------------------------------

const secret = (max: number) => z.string().min(1).max(max).regex(/^[\x21-\x7e]+$/, 'Must be printable ASCII without spaces')
  .describe(`A credential: stored encrypted, shown as "${MASKED_VALUE}"; sending "${MASKED_VALUE}" on update keeps the stored value`);
const prefix = z.string().max(512).regex(/^[^\s\\]*$/, 'Must not contain spaces or backslashes').regex(/^(?!\/)/, 'Must not start with /')
  .describe('Object key prefix');
const allowPrivate = z.boolean().default(false)
  .describe('Allow a URL whose host is or resolves to a private-use address (and plain http); link-local, metadata and reserved addresses stay refused');
/** An absolute http(s) URL without credentials or fragment (https unless allow_private_network: the service checks). */
const destinationUrl = z.url({ protocol: /^https?$/, message: 'Must be an https URL' }).max(2048)
  .refine((u) => !URL.canParse(u) || (!new URL(u).username && !new URL(u).password), 'Must not carry credentials (use the credential members)')
  .refine((u) => !u.includes('#'), 'Must not carry a fragment');

const s3Config = z.strictObject({
  bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'Must be an S3 bucket name (3..63 lower-case letters, digits, dots, hyphens)'),
  region: z.string().regex(/^[a-z0-9-]{1,32}$/, 'Must be a region such as eu-west-1'),
  prefix: prefix.optional(),
  access_key_id: secret(128),
  secret_access_key: secret(256),
  endpoint_url: destinationUrl.optional().describe('An S3-compatible service instead of AWS'),
  allow_private_network: allowPrivate,
});

const serviceAccountJson = z.string().max(16_384).superRefine((text, ctx) => {
  // The message never repeats the text: it is a private key. MASKED_VALUE keeps the stored key (the service checks one is).
  if (text === MASKED_VALUE) return;
  let parsed: unknown;
  try { parsed = JSON.parse(text); } catch { /* reported below */ }
  const key = parsed as { type?: unknown; client_email?: unknown; private_key?: unknown } | undefined;
  if (!key || typeof key !== 'object' || key.type !== 'service_account' || typeof key.client_email !== 'string' || typeof key.private_key !== 'string') {
    ctx.addIssue({ code: 'custom', message: 'Must be a Google service account key file (JSON with type "service_account", client_email and private_key)' });
  }
}).describe(`The service account key file's JSON text: stored encrypted, shown as "${MASKED_VALUE}"`);

const gcsConfig = z.strictObject({
  bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$/, 'Must be a Cloud Storage bucket name'),
  prefix: prefix.optional(),
  service_account_json: serviceAccountJson,
  endpoint_url: destinationUrl.optional().describe('Another Cloud Storage endpoint than https://storage.googleapis.com (an emulator, a private endpoint)'),
  allow_private_network: allowPrivate,
});

const datadogConfig = z.strictObject({
  site: z.enum(DATADOG_SITES),
  api_key: secret(128),
  service: lineText(100).optional(),
  source: lineText(100).optional(),
  url: destinationUrl.optional().describe('An intake URL instead of the site\'s (a Datadog agent or a pipeline speaking the intake protocol)'),
  allow_private_network: allowPrivate,
});

const elasticsearchConfig = z.strictObject({
  url: destinationUrl,
  index: z.string().max(255).regex(/^(?![-_+.])[^A-Z\\/*?"<>| ,#:]+$/, 'Must be an Elasticsearch index name (lower case, not starting with - _ + .)')
    .refine((i) => !i.replace(INDEX_PLACEHOLDERS, '').includes('{') && !i.replace(INDEX_PLACEHOLDERS, '').includes('}'), 'Braces may only stand in {yyyy}, {mm}, {dd} and {hh}')
    .describe('The index; {yyyy}, {mm}, {dd} and {hh} are replaced by each record\'s UTC date (e.g. cdn-logs-{yyyy}.{mm}.{dd})'),
  username: lineText(256).optional(),
  password: secret(256).optional(),
  api_key: secret(1024).optional(),
  allow_private_network: allowPrivate,
}).superRefine((c, ctx) => {
  if ((c.username === undefined) !== (c.password === undefined)) {
    ctx.addIssue({ code: 'custom', path: [c.username === undefined ? 'username' : 'password'], message: 'username and password go together' });
  }
  if (c.api_key !== undefined && c.username !== undefined) ctx.addIssue({ code: 'custom', path: ['api_key'], message: 'Give either api_key or username and password' });
});

/** Headers the HTTP client sets itself (framing, hop-by-hop). */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'proxy-connection', 'expect', 'content-type']);
const httpHeaders = z.record(
  tokenField('header').refine((n) => !RESERVED_HEADERS.has(n.toLowerCase()), 'This header is set by the sender and cannot be configured'),
  z.string().min(1).max(4096).regex(/^[^\r\n]*$/, 'Must be a single line'),
).refine((h) => Object.keys(h).length <= MAX_DRAIN_HEADERS, `At most ${MAX_DRAIN_HEADERS} headers`)
  .refine((h) => new Set(Object.keys(h).map((k) => k.toLowerCase())).size === Object.keys(h).length, 'Must not name a header twice (names are case-insensitive)')
  .describe(`Sent with every batch; values are stored encrypted and show as "${MASKED_VALUE}" ("${MASKED_VALUE}" on update keeps a stored value)`);

const httpConfig = z.strictObject({
  url: destinationUrl,
  headers: httpHeaders.optional(),
  auth_header: z.string().min(1).max(4096).regex(/^[^\r\n]*$/, 'Must be a single line').optional()
    .describe(`The Authorization header's value: stored encrypted, shown as "${MASKED_VALUE}"`),
  allow_private_network: allowPrivate,
}).superRefine((c, ctx) => {
  if (c.auth_header !== undefined && Object.keys(c.headers ?? {}).some((n) => n.toLowerCase() === 'authorization')) {
    ctx.addIssue({ code: 'custom', path: ['headers'], message: 'Give Authorization either in auth_header or in headers' });
  }
});

export const destinationConfigSchemas = {
  s3: s3Config, gcs: gcsConfig, datadog: datadogConfig, elasticsearch: elasticsearchConfig, http: httpConfig,
} as const satisfies Record<DestinationType, z.ZodType>;
export type DestinationConfig = Record<string, unknown>;

// ---- bodies ------------------------------------------------------------------

const fieldsField = z.array(z.enum(LOG_FIELDS)).min(1).max(LOG_FIELDS.length)
  .refine((f) => new Set(f).size === f.length, 'Must not repeat a field')
  .describe(`The fields of each log line, in this order; default all: ${LOG_FIELDS.join(', ')}`);
const endpointIdsField = z.array(uuid().transform((id) => id.toLowerCase())).max(MAX_DRAIN_ENDPOINTS)
  .refine((ids) => new Set(ids).size === ids.length, 'Must not repeat an id')
  .describe('Endpoints whose logs the drain receives (each must exist); empty (the default at top level): every endpoint');

const common = {
  name: nameField(),
  log_format: z.enum(LOG_FORMATS).default('ndjson'),
  fields: fieldsField.default([...LOG_FIELDS]),
  endpoint_ids: endpointIdsField.optional(),
};

/** Create: destination_config is checked against destination_type's schema. */
/** Elasticsearch indexes JSON documents: a W3C log line is no document. */
export const ELASTICSEARCH_FORMATS = ['json', 'ndjson'] as const;

export const createLogDrainBody = withExample(z.discriminatedUnion('destination_type', DESTINATION_TYPES.map((type) => z.strictObject({
  ...common,
  ...(type === 'elasticsearch' ? { log_format: z.enum(ELASTICSEARCH_FORMATS).default('ndjson').describe('Elasticsearch indexes JSON documents: json or ndjson (the same documents)') } : {}),
  destination_type: z.literal(type),
  destination_config: destinationConfigSchemas[type],
})) as unknown as [z.ZodObject, ...z.ZodObject[]]), {
  name: 'Access logs to the collector', destination_type: 'http', log_format: 'ndjson',
  destination_config: { url: 'https://logs.example.com/ingest', auth_header: 'Bearer replace-with-your-token' },
  fields: ['timestamp', 'client_ip', 'method', 'host', 'path', 'status', 'bytes_sent', 'cache_status', 'duration_ms', 'country'],
});
export type CreateLogDrainInput = {
  name: string; destination_type: DestinationType; destination_config: DestinationConfig; log_format: (typeof LOG_FORMATS)[number];
  fields: (typeof LOG_FIELDS)[number][]; endpoint_ids?: string[];
};

/** Update: destination_type is fixed; destination_config replaces the stored one and is checked against the drain's type. */
export const updateLogDrainBody = z.strictObject({
  name: nameField(),
  destination_config: z.record(z.string(), z.unknown())
    .describe(`The whole configuration for the drain's destination_type (replaces the stored one); a credential sent as "${MASKED_VALUE}" keeps its stored value`),
  log_format: z.enum(LOG_FORMATS),
  fields: fieldsField,
  endpoint_ids: endpointIdsField,
}).partial();
export type UpdateLogDrainInput = z.output<typeof updateLogDrainBody>;
