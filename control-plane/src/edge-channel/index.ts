// The control channel capability (DESIGN.md §7): the gRPC stream edge agents
// hold, with its session layer (channel-hub.ts) and the feeds that plug into
// it (configuration, purges, prefetch jobs, origin health, log drains,
// traffic reports, shields), the edge nodes, and the agent tokens agents
// authenticate with. It pushes what the configuration side publishes
// (cdn-config's ConfigSource, services.edgeConfig) and gives it back how far
// each version has reached (services.edgeFleet). It builds on the CDN and
// configuration capabilities and starts after them.
import { AgentToken } from './agent-token.entity.ts';
import { agentTokenExpirySweepJob } from './agent-token-jobs.ts';
import { agentTokenRoutes } from './agent-token-routes.ts';
import { startAgentTokens } from './agent-token-start.ts';
import { purgeAckRetentionJob } from './channel-jobs.ts';
import { startChannel } from './channel-server.ts';
import { edgeChannelEntities } from './nodes-entity.ts';
import { edgeNodeRoutes } from './nodes-routes.ts';
import type { EdgeChannelServices } from './services.ts';

export type { EdgeChannel, EdgeChannelServices } from './services.ts';
export { AGENT_TOKEN_REVOKED_CHANNEL, type AgentTokenVerifier } from './contracts.ts';
export { agentTokenCommand } from './agent-token-command.ts';
export { agentTokenArgs } from './agent-token-record.ts';

export const edgeChannel = {
  name: 'edge-channel',
  entities: [AgentToken, ...edgeChannelEntities],
  routes: [...agentTokenRoutes, ...edgeNodeRoutes],
  jobs: [agentTokenExpirySweepJob, purgeAckRetentionJob],
  async start(services: EdgeChannelServices) {
    // The channel checks agents' tokens with the verifier started first.
    const agentTokens = await startAgentTokens(services);
    Object.assign(services, agentTokens.services);
    const channel = await startChannel(services);
    return {
      services: { ...agentTokens.services, ...channel.services },
      metrics: channel.metrics,
      close: () => channel.close(),
    };
  },
};
