// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import type { CoreServices } from '../core/services.ts';
import { configEntities } from './config-entities.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [...configEntities],
  routes: [],
  jobs: [],
  async start(_services: CoreServices) {
    return {};
  },
};
