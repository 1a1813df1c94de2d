// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import { startChannel } from './channel-server.ts';
import { edgeChannelEntities } from './nodes-entity.ts';
import { edgeNodeRoutes } from './nodes-routes.ts';
import type { EdgeServices } from './services.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [...edgeChannelEntities],
  routes: [...edgeNodeRoutes],
  jobs: [],
  async start(services: EdgeServices) {
    const channel = await startChannel(services);
    return { services: { ...channel.services }, close: channel.close };
  },
};
