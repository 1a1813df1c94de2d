// What the configuration versions capability adds to the platform's services,
// what it reads that the control channel adds, and the route declaration of
// its routes.
import type { CdnServices } from '../cdn/index.ts';
import { routesFor } from '../http/route.ts';
import type { ConfigSource, FleetView } from './contracts.ts';

export interface CdnConfigServices extends CdnServices {
  /** Published configuration versions, for the control channel to diff and push (config-store.ts). */
  edgeConfig: ConfigSource;
  /**
   * How far versions have propagated across the edge nodes: the control channel (edge-channel) adds it when it
   * starts, after this capability; read when used, and zero counts without it.
   */
  edgeFleet?: FleetView;
}

export const defineConfigRoute = routesFor<CdnConfigServices>();
