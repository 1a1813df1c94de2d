// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import { AgentToken } from './agent-token.entity.ts';
import { agentTokenExpirySweepJob } from './agent-token-jobs.ts';
import { agentTokenRoutes } from './agent-token-routes.ts';
import { startAgentTokens } from './agent-token-start.ts';
import type { EdgeServices } from './services.ts';
import { configEntities } from './config-entities.ts';
import { configRoutes } from './config-routes.ts';
import { startConfig } from './config-start.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [AgentToken, ...configEntities],
  routes: [...agentTokenRoutes, ...configRoutes],
  jobs: [agentTokenExpirySweepJob],
  async start(services: EdgeServices) {
    const agentTokens = await startAgentTokens(services);
    const config = await startConfig(services);
    return { services: { ...agentTokens.services, ...config.services }, close: config.close };
  },
};
