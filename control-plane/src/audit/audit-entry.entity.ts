import { defineEntity, p } from '@mikro-orm/core';

// Field names follow the API (document 3, Audit log entry), so records map 1:1.
export const AuditEntrySchema = defineEntity({
  name: 'AuditEntry',
  tableName: 'audit_log',
  properties: {
    id: p.uuid().primary().defaultRaw('gen_random_uuid()').onCreate(() => crypto.randomUUID()),
    action: p.string().length(200),
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
    { name: 'audit_log_actor_idx', properties: ['actor_id'] },
    // The CDN audit list (migration 0013): action prefixes (`origin.*`), and a set of resource types newest first.
    { name: 'audit_log_action_idx', expression: 'create index "audit_log_action_idx" on "audit_log" ("action" varchar_pattern_ops)' },
    { name: 'audit_log_resource_type_created_at_idx', expression: 'create index "audit_log_resource_type_created_at_idx" on "audit_log" ("resource_type", "created_at" desc, "id" desc)' },
    // The CDN audit list's sort=action (migration 0018).
    { name: 'audit_log_action_sort_idx', properties: ['action', 'id'] },
    // Entries about a user's resources name the owner as metadata.user_id (export and erasure find them by it).
    { name: 'audit_log_metadata_user_idx', expression: `create index "audit_log_metadata_user_idx" on "audit_log" ((metadata->>'user_id')) where (metadata->>'user_id') is not null` },
  ],
});

export class AuditEntry extends AuditEntrySchema.class {}
AuditEntrySchema.setClass(AuditEntry);
