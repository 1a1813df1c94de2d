// The CDN's policies (document 3 §2): response headers policies, signing keys,
// IP access rules and log drains. Field names and nested shapes are the API's
// and the edge snapshot's (shared/src/config/snapshot.ts). Secrets (signing
// key secrets, log drain credentials) are stored only sealed by the secret box
// (crypto/secret-box.ts), bound to their row by the AAD.
import { defineEntity, p } from '@mikro-orm/core';
import { Endpoint, searchDocumentProperty, searchIndex, timestamps } from './cdn.entities.ts';

export const SIGNING_ALGORITHMS = ['HMAC-SHA256', 'HMAC-SHA512'] as const;
export const SIGNING_KEY_STATUSES = ['active'] as const;
export const IP_ACTIONS = ['allow', 'block', 'challenge'] as const;
export const DESTINATION_TYPES = ['s3', 'datadog', 'elasticsearch', 'http', 'gcs'] as const;
export type DestinationType = (typeof DESTINATION_TYPES)[number];
export const LOG_FORMATS = ['json', 'ndjson', 'w3c_extended'] as const;
export const DRAIN_STATUSES = ['active', 'paused', 'error'] as const;

export interface HeaderEntry { name: string; value: string; override: boolean }
export interface Cors {
  enabled: boolean; allow_origins: string[]; allow_methods: string[]; allow_headers: string[]; expose_headers: string[];
  allow_credentials: boolean; max_age_seconds: number | null; override_origin: boolean;
}
interface Toggle { enabled: boolean; override: boolean }
export interface SecurityHeaders {
  strict_transport_security: Toggle & { max_age_seconds: number; include_subdomains: boolean; preload: boolean };
  content_security_policy: Toggle & { policy: string; report_only: boolean };
  x_content_type_options: Toggle;
  x_frame_options: Toggle & { value: string };
  referrer_policy: Toggle & { value: string };
  permissions_policy: Toggle & { policy: string };
  x_xss_protection: Toggle & { value: string };
}
/** A retired signing secret, accepted until valid_until (the end of its grace period). */
export interface RetiredSecret { secret_sealed: string; valid_until: string }

export const HeaderPolicySchema = defineEntity({
  name: 'ResponseHeadersPolicy',
  tableName: 'cdn_response_headers_policy',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    description: p.string().length(500),
    cors: p.json<Cors>(),
    security_headers: p.json<SecurityHeaders>(),
    custom_response_headers: p.json<HeaderEntry[]>(),
    custom_request_headers: p.json<HeaderEntry[]>(),
    remove_response_headers: p.json<string[]>(),
    remove_request_headers: p.json<string[]>(),
    search_document: searchDocumentProperty(['description'], false),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_response_headers_policy_created_at_idx', properties: ['created_at', 'id'] },
    searchIndex('cdn_response_headers_policy'),
  ],
});
export class ResponseHeadersPolicy extends HeaderPolicySchema.class {}
HeaderPolicySchema.setClass(ResponseHeadersPolicy);

export const SigningKeySchema = defineEntity({
  name: 'SigningKey',
  tableName: 'cdn_signing_key',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    endpoint: () => p.manyToOne(Endpoint).deleteRule('cascade'),
    name: p.string().length(100),
    algorithm: p.enum(SIGNING_ALGORITHMS),
    status: p.enum(SIGNING_KEY_STATUSES),
    secret_sealed: p.text(),
    // Secrets replaced by a rotation, still accepted until their grace ends (dropped by the sweep job).
    retired_secrets: p.json<RetiredSecret[]>(),
    token_param: p.string().length(64),
    expires_param: p.string().length(64),
    ip_binding_enabled: p.boolean(),
    rotated_at: p.datetime().nullable(),
    ...timestamps,
  },
  indexes: [{ name: 'cdn_signing_key_endpoint_idx', properties: ['endpoint', 'created_at', 'id'] }],
});
export class SigningKey extends SigningKeySchema.class {}
SigningKeySchema.setClass(SigningKey);

export const IpRuleSchema = defineEntity({
  name: 'IpRule',
  tableName: 'cdn_ip_rule',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    endpoint: () => p.manyToOne(Endpoint).deleteRule('cascade'),
    action: p.enum(IP_ACTIONS),
    cidr: p.string().length(49),
    description: p.string().length(255).nullable(),
    priority: p.integer(),
    ...timestamps,
  },
  uniques: [{ name: 'cdn_ip_rule_endpoint_cidr_key', properties: ['endpoint', 'cidr'] }],
  indexes: [{ name: 'cdn_ip_rule_endpoint_idx', properties: ['endpoint', 'created_at', 'id'] }],
});
export class IpRule extends IpRuleSchema.class {}
IpRuleSchema.setClass(IpRule);

export const LogDrainSchema = defineEntity({
  name: 'LogDrain',
  tableName: 'cdn_log_drain',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    destination_type: p.enum(DESTINATION_TYPES),
    // The members that are not credentials; the credentials are in destination_secrets_sealed (JSON, sealed).
    destination_config: p.json<Record<string, unknown>>(),
    destination_secrets_sealed: p.text(),
    log_format: p.enum(LOG_FORMATS),
    fields: p.json<string[]>(),
    endpoint_ids: p.json<string[]>(),
    status: p.enum(DRAIN_STATUSES),
    last_error: p.string().length(1000).nullable(),
    // Records the edge nodes dropped (their buffers overflowed), summed over the nodes that reported the drain.
    records_dropped: p.bigint('number').default(0),
    search_document: searchDocumentProperty([], false),
    ...timestamps,
  },
  indexes: [
    { name: 'cdn_log_drain_created_at_idx', properties: ['created_at', 'id'] },
    { name: 'cdn_log_drain_endpoint_ids_idx', expression: 'create index cdn_log_drain_endpoint_ids_idx on cdn_log_drain using gin (endpoint_ids jsonb_path_ops)' },
    { name: 'cdn_log_drain_status_idx', properties: ['status', 'created_at', 'id'] },
    searchIndex('cdn_log_drain'),
  ],
});
export class LogDrain extends LogDrainSchema.class {}
LogDrainSchema.setClass(LogDrain);

export const policyEntities = [ResponseHeadersPolicy, SigningKey, IpRule, LogDrain];
