// What the edge capability adds to the platform's services, and the route
// declaration of its routes.
import type { CdnServices } from '../cdn/services.ts';
import { routesFor } from '../http/route.ts';
import type { AgentTokenVerifier, ConfigSource, FleetView } from './contracts.ts';

export interface EdgeServices extends CdnServices {
  /** Published configuration versions, for the channel to diff and push (configuration side). */
  edgeConfig: ConfigSource;
  /** How far versions have propagated across the edge nodes (channel side). */
  edgeFleet: FleetView;
  /** Checks the agent tokens agents present on their streams. */
  edgeAgentTokens: AgentTokenVerifier;
}

export const defineEdgeRoute = routesFor<EdgeServices>();
