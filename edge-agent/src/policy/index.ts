// Edge policies run between endpoint lookup and route match (DESIGN.md §8):
// IP rules → geo restriction → signed URLs → redirect rules. Response-side
// policies (header policies, compression, custom error pages) and log drains
// hook in after the response is chosen. None is built yet (a later issue);
// this is the seam the request pipeline calls, so adding one is local to here.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CompiledEndpoint } from '../proxy/routing.ts';

export interface PolicyRequest {
  req: IncomingMessage;
  res: ServerResponse;
  endpoint: CompiledEndpoint;
  host: string;
  path: string;
  query: string;
  clientIp: string;
}

/** Request-side policy: returns true when it has answered the request itself (block, redirect, challenge). */
export type RequestPolicy = (ctx: PolicyRequest) => boolean;

/** Per-endpoint request policies, compiled from the snapshot; an empty list costs one length check per request. */
export function compileRequestPolicies(_endpoint: CompiledEndpoint): RequestPolicy[] {
  return [];
}
