// What the control channel capability adds to the platform's services, what
// it reads that the configuration side adds, and the route declaration of its
// routes.
import type { CdnServices } from '../cdn/index.ts';
import type { ConfigSource, FleetView } from '../cdn-config/index.ts';
import { routesFor } from '../http/route.ts';
import type { AgentTokenVerifier } from './contracts.ts';

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

export interface EdgeChannelServices extends CdnServices {
  /** Published configuration versions, which the channel diffs and pushes (the configuration side, cdn-config, provides it; read when used). */
  edgeConfig: ConfigSource;
  /** How far versions have propagated across the edge nodes (the channel provides it to the configuration side). */
  edgeFleet: FleetView;
  /** Checks the agent tokens agents present on their streams. */
  edgeAgentTokens: AgentTokenVerifier;
  /** The control channel's server, once started. */
  edgeChannel?: EdgeChannel;
}

export const defineEdgeRoute = routesFor<EdgeChannelServices>();
