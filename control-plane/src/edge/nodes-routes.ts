// Edge nodes (document 3 §4.13 "List edge nodes"): viewers and up read them.
import { z } from 'zod';
import { page } from '../http/route.ts';
import { orNull, pageQuery, queryBoolean, timestampOrNull } from '../http/schemas.ts';
import { EDGE_NODE_STATUSES } from './nodes-entity.ts';
import { listEdgeNodes } from './nodes-service.ts';
import { defineEdgeRoute as defineRoute } from './services.ts';

export const edgeNodeRecord = z.object({
  id: z.uuid(),
  hostname: z.string(),
  region: z.string(),
  status: z.enum(EDGE_NODE_STATUSES),
  config_version: z.number().int().describe('The configuration version the node applied (0: none)'),
  config_synced: z.boolean().describe('Whether config_version is the active configuration version'),
  last_seen_at: timestampOrNull(),
  agent_version: z.string(),
  failed_config_version: orNull(z.number().int()).describe('The highest configuration version the node refused (it keeps serving the previous one); it is not sent that version again'),
  config_error: orNull(z.string()).describe('Why the node refused failed_config_version (cleared when it applies a later version)'),
  purge_sequence: z.number().int().describe('The last purge sequence the node applied'),
});

const list = defineRoute({
  method: 'get', path: '/v1/cdn/edge-nodes', tags: ['CDN: edge nodes'], access: { permission: 'cdn.read' },
  summary: 'List edge nodes',
  description: 'Ordered by hostname. Filters: status (online, offline, draining), region (exact), config_synced (true: the node applied the active '
    + 'configuration version; false: any other). A node registers when its agent connects, is offline once its stream ends or its heartbeats stop '
    + '(3 intervals), and draining while its agent shuts down. Beyond the spec\'s fields: agent_version, failed_config_version, config_error and purge_sequence.',
  query: pageQuery({
    status: z.enum(EDGE_NODE_STATUSES).optional(),
    region: z.string().min(1).max(64).optional(),
    config_synced: queryBoolean().optional(),
  }),
  responses: { 200: page(edgeNodeRecord) },
  async handler({ query, rc, app }) {
    return listEdgeNodes(rc, (app as Partial<typeof app>).edgeConfig, query, query);
  },
});

export const edgeNodeRoutes = [list];
