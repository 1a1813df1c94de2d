// The edge capability: configuration versions (the working configuration
// compiled, validated, published and rolled back), the agent tokens edge
// agents authenticate with, the edge nodes, and the gRPC control channel that
// pushes configuration, purges and prefetch jobs to the agents and records
// their acknowledgements (DESIGN.md §7). It builds on the CDN capability.
import { AgentToken } from './agent-token.entity.ts';
import { agentTokenExpirySweepJob } from './agent-token-jobs.ts';
import { agentTokenRoutes } from './agent-token-routes.ts';
import { startAgentTokens } from './agent-token-start.ts';
import { configEntities } from './config-entities.ts';
import { configRoutes } from './config-routes.ts';
import { startConfig } from './config-start.ts';
import { purgeAckRetentionJob } from './channel-jobs.ts';
import { startChannel } from './channel-server.ts';
import { edgeChannelEntities } from './nodes-entity.ts';
import { edgeNodeRoutes } from './nodes-routes.ts';
import type { EdgeServices } from './services.ts';

export type { EdgeServices } from './services.ts';

export const edge = {
  name: 'edge',
  entities: [AgentToken, ...configEntities, ...edgeChannelEntities],
  routes: [...agentTokenRoutes, ...configRoutes, ...edgeNodeRoutes],
  jobs: [agentTokenExpirySweepJob, purgeAckRetentionJob],
  async start(services: EdgeServices) {
    // Each part sees the services of those started before it (the channel pushes from edgeConfig and checks
    // edgeAgentTokens); configuration versions read edgeFleet from the same object once the channel has added it.
    const agentTokens = await startAgentTokens(services);
    Object.assign(services, agentTokens.services);
    const config = await startConfig(services);
    Object.assign(services, config.services);
    const channel = await startChannel(services);
    return {
      services: { ...agentTokens.services, ...config.services, ...channel.services },
      metrics: channel.metrics,
      async close() {
        await channel.close();
        await config.close();
      },
    };
  },
};
