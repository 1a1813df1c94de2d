// Configuration versions (document 3 §2 "Configuration version", §4.12;
// migration 0021). A version is the working configuration compiled into
// resources (shared/src/config/resources.ts): its manifest maps each resource
// key to [the version it last changed in, the sha256 of its body], and the
// bodies live once each in cdn_config_resource, sealed. Drafts (validate)
// keep no manifest. cdn_config_revision is the one-row counter the
// configuration tables' triggers bump (CDN_PUBLISH_MODE=auto polls it).
import { defineEntity, p } from '@mikro-orm/core';
import type { PropagationCounts } from './contracts.ts';

export const CONFIG_VERSION_STATUSES = ['draft', 'validating', 'valid', 'invalid', 'publishing', 'active', 'superseded', 'rolled_back'] as const;
export type ConfigVersionStatus = (typeof CONFIG_VERSION_STATUSES)[number];

/** One problem of a compiled configuration, named by the resource it is about. */
export interface ValidationProblem { resource_type: string; resource_id: string; message: string }

/** Resource key → [version it last changed in, sha256 of its body]. */
export type StoredManifest = Record<string, [number, string]>;

export const ConfigVersionSchema = defineEntity({
  name: 'ConfigVersion',
  tableName: 'cdn_config_version',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    // From cdn_config_version_number_seq, taken under the configuration lock: increasing in publish order.
    version_number: p.bigint('number').unique('cdn_config_version_number_key'),
    description: p.string().length(500),
    status: p.enum(CONFIG_VERSION_STATUSES),
    validation_errors: p.json<ValidationProblem[]>(),
    // null for drafts (validate stores no bodies).
    manifest: p.json<StoredManifest>().nullable().lazy(),
    digest: p.string().length(64),
    resource_count: p.integer(),
    // The value of cdn_config_revision.revision the version was compiled at.
    config_revision: p.bigint('number'),
    // The counts when the version stopped being active (live counts before).
    propagation_final: p.json<PropagationCounts>().nullable(),
    // Set by the control channel when every online node has applied this version or a later one.
    propagation_completed_at: p.datetime().nullable(),
    published_by: p.uuid().nullable(),
    published_at: p.datetime().nullable(),
    // A rollback's version: the version it restored and why.
    rollback_target_id: p.uuid().nullable(),
    rollback_reason: p.string().length(500).nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'cdn_config_version_active_idx', expression: `create unique index cdn_config_version_active_idx on cdn_config_version (status) where status = 'active'` },
    { name: 'cdn_config_version_status_idx', properties: ['status', 'version_number'] },
  ],
});
export class ConfigVersion extends ConfigVersionSchema.class {}
ConfigVersionSchema.setClass(ConfigVersion);

export const ConfigResourceSchema = defineEntity({
  name: 'ConfigResource',
  tableName: 'cdn_config_resource',
  properties: {
    sha256: p.string().length(64).primary(),
    // The resource's JSON sealed by the secret box (AAD: table and sha256), as UTF-8 bytes.
    body: p.blob().lazy(),
    created_at: p.datetime(),
  },
});
export class ConfigResource extends ConfigResourceSchema.class {}
ConfigResourceSchema.setClass(ConfigResource);

export const ConfigRevisionSchema = defineEntity({
  name: 'ConfigRevision',
  tableName: 'cdn_config_revision',
  properties: {
    id: p.smallint().primary().autoincrement(false),
    revision: p.bigint('number'),
    // The revision the last compile (by any replica) looked at.
    compiled_revision: p.bigint('number'),
  },
});
export class ConfigRevision extends ConfigRevisionSchema.class {}
ConfigRevisionSchema.setClass(ConfigRevision);

export const configEntities = [ConfigVersion, ConfigResource, ConfigRevision];
