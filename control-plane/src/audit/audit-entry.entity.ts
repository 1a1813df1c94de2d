import { defineEntity, p } from '@mikro-orm/core';

// Field names follow the API (document 3, Audit log entry), so records map 1:1.
export const AuditEntrySchema = defineEntity({
  name: 'AuditEntry',
  tableName: 'audit_log',
  properties: {
    id: p.uuid().primary().defaultRaw('gen_random_uuid()').onCreate(() => crypto.randomUUID()),
    // Machine identifiers (`origin.updated`), compared byte-wise: under "C" one btree serves an exact action,
    // a prefix (LIKE 'origin.%') and ORDER BY action (migration 0020).
    action: p.string().length(200).collation('C'),
    actor_id: p.uuid().nullable(),
    actor_type: p.string().length(20),
    actor_role: p.string().length(50).nullable(),
    resource_type: p.string().length(100),
    resource_id: p.string().length(100).nullable(),
    ip_address: p.string().length(64).nullable(),
    user_agent: p.string().length(512).nullable(),
    request_id: p.string().length(128).nullable(),
    metadata: p.json<Record<string, unknown>>().default('{}'),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  indexes: [
    { name: 'audit_log_created_at_idx', expression: 'create index "audit_log_created_at_idx" on "audit_log" ("created_at" desc, "id" desc)' },
    { name: 'audit_log_resource_idx', properties: ['resource_type', 'resource_id'] },
    // An actor's entries, newest first; counted from the index alone under the CDN list's filters (migration 0020).
    {
      name: 'audit_log_actor_created_at_idx',
      expression: 'create index "audit_log_actor_created_at_idx" on "audit_log" ("actor_id", "created_at" desc, "id" desc) include ("resource_type", "action")',
    },
    // The CDN audit list (migrations 0013, 0020): a set of resource types newest first; one type by action.
    { name: 'audit_log_resource_type_created_at_idx', expression: 'create index "audit_log_resource_type_created_at_idx" on "audit_log" ("resource_type", "created_at" desc, "id" desc)' },
    { name: 'audit_log_resource_type_action_idx', properties: ['resource_type', 'action', 'id'] },
    // Its action filters (exact, prefix) and sort=action over the CDN scope: a frozen copy of
    // cdn-admin/audit-scope.ts's types (cdn-admin/audit-logs.test.ts checks the list uses this index).
    {
      name: 'audit_log_cdn_action_idx',
      expression: `create index "audit_log_cdn_action_idx" on "audit_log" ("action", "id") where resource_type in ('endpoint', 'origin', 'route', 'cache_rule', `
        + `'purge_request', 'prefetch_job', 'custom_domain', 'certificate', 'response_headers_policy', 'signing_key', 'ip_rule', 'log_drain', 'config_version', `
        + `'edge_node', 'agent_token', 'admin_user', 'api_token')`,
    },
    // Entries about a user's resources name the owner as metadata.user_id (export and erasure find them by it).
    { name: 'audit_log_metadata_user_idx', expression: `create index "audit_log_metadata_user_idx" on "audit_log" ((metadata->>'user_id')) where (metadata->>'user_id') is not null` },
  ],
});

export class AuditEntry extends AuditEntrySchema.class {}
AuditEntrySchema.setClass(AuditEntry);
