// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import type { AppServices } from '../capabilities.ts';
import { configEntities } from './config-entities.ts';
import { configRoutes } from './config-routes.ts';
import { startConfig } from './config-start.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [...configEntities],
  routes: [...configRoutes],
  jobs: [],
  async start(services: AppServices) {
    const config = await startConfig(services);
    return { services: { ...config.services }, close: config.close };
  },
};
