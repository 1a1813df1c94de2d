// What the HTTP framework itself needs: the platform services, and a guard
// that the composition root plugs in (auth implements it). The framework
// knows no capability: routes bring their own services type.
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import type { AccessRule, RouteInput } from './route.ts';

export interface AccessControl {
  /** Establishes rc.actor from the Authorization header; throws 401 when the rule needs a caller and none is valid. */
  authenticate(rc: RequestContext, authorization: string, rule: AccessRule): Promise<void>;
  /** Checks the rule's permission against stored roles and sets rc.access; throws 403. Runs before validation unless the rule reads a resource id from the input. */
  authorize(rc: RequestContext, rule: AccessRule, input: RouteInput): Promise<void>;
}

export type HttpServices = CoreServices;
