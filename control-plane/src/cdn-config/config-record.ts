// The Configuration version record and the bodies of validate, publish and
// rollback (document 3 §2 "Configuration version", §4.12).
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { lineText, orNull, pageQuery, timestamp, timestampOrNull, uuid } from '../http/schemas.ts';
import { CONFIG_VERSION_STATUSES } from './config-entities.ts';

const count = () => z.number().int().min(0);

export const configVersionRecord = z.object({
  id: z.uuid(),
  version_number: z.number().int().describe('Increasing in publish order; the version edge nodes report having applied'),
  description: z.string(),
  status: z.enum(CONFIG_VERSION_STATUSES).describe('valid or invalid: a draft made by validate; active: the published version edge nodes converge on; '
    + 'superseded: replaced by a later publish (a rollback target); rolled_back: replaced by a rollback'),
  validation_errors: z.array(z.object({ resource_type: z.string(), resource_id: z.string(), message: z.string() })),
  propagation_status: z.object({
    total_nodes: count(), synced_nodes: count(), pending_nodes: count(), failed_nodes: count(),
    completed_at: timestampOrNull().describe('When every online node had applied this version or a later one'),
  }).describe('Over the nodes online now for the active version; as they stood when it was replaced for older ones; zero for drafts'),
  resource_count: count().describe('Resources in the version (endpoints, response headers policies, log drains)'),
  digest: z.string().describe('Digest of the whole configuration (the one edge nodes check after applying it)'),
  rollback_target_id: orNull(z.uuid()).describe('For a rollback\'s version: the version it restored'),
  published_by: orNull(z.uuid()),
  published_at: timestampOrNull(),
  created_at: timestamp(),
});
export const configVersionResource = versioned(configVersionRecord);

export const versionListQuery = pageQuery({ status: z.enum(CONFIG_VERSION_STATUSES).optional() });

const description = () => lineText(500, 0).describe('At most 500 characters');
export const validateBody = z.strictObject({ description: description().default('') });
export const publishBody = z.strictObject({ description: description().default('') });
export const rollbackBody = z.strictObject({
  target_version_id: uuid().describe('A superseded version'),
  reason: lineText(500, 0).optional().describe('At most 500 characters; kept in the audit log'),
});
