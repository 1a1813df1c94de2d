// Edge nodes (document 3 §4.13 "List edge nodes"): viewers and up read them.
import { z } from 'zod';
import { list as wholeList, page } from '../http/route.ts';
import { orNull, pageQuery, queryBoolean, timestampOrNull } from '../http/schemas.ts';
import { EDGE_NODE_STATUSES } from './nodes-entity.ts';
import { listEdgeNodes, listShieldRegions } from './nodes-service.ts';
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
  failed_config_version: orNull(z.number().int()).describe('The highest configuration version the node refused (it keeps serving the previous one), until it applies that version or a later one (then null); it is not sent that version again on the same stream'),
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

export const shieldRegionRecord = z.object({
  id: z.string().describe('The region id, as endpoints name it in shield_region'),
  name: z.string().describe('As its nodes name it (REGION_NAME); the id when none does'),
  location: z.object({ country_code: orNull(z.string()), city: orNull(z.string()) }),
  available: z.boolean().describe('Whether one of its shield nodes is online now and answers the agents of other regions (false while every agent that measured it found its shield nodes refusing or silent)'),
  latency_hint_ms: orNull(z.number().int()).describe('The median of what the online nodes of other regions last measured to its shield nodes (null before any did)'),
});

const shieldRegions = defineRoute({
  method: 'get', path: '/v1/cdn/shield-regions', tags: ['CDN: edge nodes'], access: { permission: 'cdn.read' },
  summary: 'List shield regions',
  description: 'The regions with edge nodes willing to shield (they advertise an address other agents reach them at), ordered by id, whatever their '
    + 'status: `available` says whether one is online and answers the other regions\' agents. An endpoint\'s shield_region must be one of these ids; a miss on an agent outside that region '
    + 'is then fetched through a shield node of the region, so only the shield goes to the origin. Name and location are what its nodes report.',
  responses: { 200: wholeList(shieldRegionRecord) },
  async handler({ rc }) {
    return listShieldRegions(rc.em);
  },
});

export const edgeNodeRoutes = [list, shieldRegions];
