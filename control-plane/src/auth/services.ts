// The services auth adds to the platform's, and the route declaration of the
// capabilities that use them (auth itself, and administration above it).
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { ApiTokenResolver } from './access-control.ts';
import type { SessionService } from './session-service.ts';
import type { TokenService } from './token-service.ts';

export interface AuthServices extends CoreServices {
  tokens: TokenService;
  sessions: SessionService;
  /** Resolves `Bearer cdn_...` machine tokens (provided by the CDN administration capability). */
  resolveApiToken?: ApiTokenResolver;
}

export const defineAuthRoute = routesFor<AuthServices>();
