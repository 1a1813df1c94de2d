// The services auth adds to the platform's, and the route declaration of the
// capabilities that use them (auth itself, and administration above it).
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { SessionService } from './session-service.ts';
import type { TokenService } from './token-service.ts';

export interface AuthServices extends CoreServices {
  tokens: TokenService;
  sessions: SessionService;
}

export const defineAuthRoute = routesFor<AuthServices>();
