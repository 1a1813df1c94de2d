// What the control channel's agent tokens give the session layer: the
// verifier of the token an agent presents, and the announcement of a
// revocation. (What the channel pushes it reads through the configuration
// side's seam, cdn-config/contracts.ts.)

/** Checks the agent token an agent presents in its stream's metadata (`authorization: Bearer agt_...`). */
export interface AgentTokenVerifier {
  /** The token's id when it is active (not revoked, not expired); null otherwise. Never logs the token. */
  verify(token: string): Promise<{ id: string } | null>;
}

/** Published when an agent token is revoked, with {"id": <token uuid>}: every replica closes that token's streams at once. */
export const AGENT_TOKEN_REVOKED_CHANNEL = 'edge:agent-token-revoked';
