// What the CDN capability adds to the platform's services, and the route
// declaration of its routes.
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { HostLookup } from './origin-host.ts';

export interface CdnServices extends CoreServices {
  /** Resolves an origin's host name at write time (the SSRF check); replaceable in tests. */
  cdnHostLookup: HostLookup;
}

export const defineCdnRoute = routesFor<CdnServices>();
