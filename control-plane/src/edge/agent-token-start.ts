// Starts the agent-token side of the edge capability: the verifier the
// control channel checks agents' tokens with.
import type { CoreServices } from '../core/services.ts';
import { agentTokenVerifier } from './agent-token-service.ts';
import type { EdgeServices } from './services.ts';

export async function startAgentTokens(services: CoreServices): Promise<{ services: Pick<EdgeServices, 'edgeAgentTokens'> }> {
  return { services: { edgeAgentTokens: agentTokenVerifier(services) } };
}
