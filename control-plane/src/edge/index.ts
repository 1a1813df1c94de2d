// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import type { CoreServices } from '../core/services.ts';
import { AgentToken } from './agent-token.entity.ts';
import { agentTokenExpirySweepJob } from './agent-token-jobs.ts';
import { agentTokenRoutes } from './agent-token-routes.ts';
import { startAgentTokens } from './agent-token-start.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [AgentToken],
  routes: [...agentTokenRoutes],
  jobs: [agentTokenExpirySweepJob],
  async start(services: CoreServices) {
    const agentTokens = await startAgentTokens(services);
    return { services: { ...agentTokens.services } };
  },
};
