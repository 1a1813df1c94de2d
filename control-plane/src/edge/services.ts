// What the edge capability adds to the platform's services, and the route
// declaration of its routes.
import type { CdnServices } from '../cdn/services.ts';
import { routesFor } from '../http/route.ts';
import type { AgentTokenVerifier, ConfigSource, FleetView } from './contracts.ts';

/** What of the channel's hub (channel-hub.ts) is reachable from the services: waits and sweeps tests drive. */
export interface ChannelHubControls {
  /** Resolves once this replica listens on the channel's pub/sub subjects. */
  readonly subscribed: Promise<void>;
  /** Writes the buffered acknowledgements and heartbeats now. */
  flush(): Promise<void>;
  /** Marks the nodes whose heartbeats stopped offline now; returns their ids. */
  sweep(): Promise<string[]>;
  /** Closes the streams whose agent token is no longer active (run when the pub/sub subscription comes back); returns how many. */
  recheckTokens(): Promise<number>;
  /** Runs the periodic catch-up now (silent nodes, missed purges, the active version, prefetch jobs). */
  poll(): Promise<void>;
}

/** The control channel of this replica (channel-server.ts). */
export interface EdgeChannel {
  /** The port the gRPC server listens on (GRPC_PORT, or the one picked for GRPC_PORT=0). */
  port: number;
  tls: boolean;
  /** This process's replica id (cdn_edge_node.replica_id of the nodes it holds). */
  replicaId: string;
  hub: ChannelHubControls;
}

export interface EdgeServices extends CdnServices {
  /** Published configuration versions, for the channel to diff and push (configuration side). */
  edgeConfig: ConfigSource;
  /** How far versions have propagated across the edge nodes (channel side). */
  edgeFleet: FleetView;
  /** Checks the agent tokens agents present on their streams. */
  edgeAgentTokens: AgentTokenVerifier;
  /** The control channel's server, once started. */
  edgeChannel?: EdgeChannel;
}

export const defineEdgeRoute = routesFor<EdgeServices>();
