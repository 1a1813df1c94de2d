// Starts the agent tokens of the control channel capability: the verifier the
// control channel checks agents' tokens with.
import type { CoreServices } from '../core/services.ts';
import { agentTokenVerifier } from './agent-token-service.ts';
import type { EdgeChannelServices } from './services.ts';

export async function startAgentTokens(services: CoreServices): Promise<{ services: Pick<EdgeChannelServices, 'edgeAgentTokens'> }> {
  return { services: { edgeAgentTokens: agentTokenVerifier(services) } };
}
