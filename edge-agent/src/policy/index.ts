// Edge policies (DESIGN.md §8). Request-side policies run between endpoint
// lookup and route match (IP rules → geo restriction → signed URLs → redirect
// rules) and may answer the request themselves; response-side policies (header
// policies, compression, custom error pages) run on every answer of the
// endpoint, in the proxy's single exit, before the head is written. None is
// built yet (a later issue): these are the seams the request path calls, so
// adding one is local to here.
import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { CacheStatus } from '../metrics/traffic.ts';
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';

/** What a policy knows of its endpoint: its id and configuration (the proxy's compiled form stays the proxy's). */
export interface PolicyEndpoint {
  readonly id: string;
  readonly snapshot: EndpointSnapshot;
}

export interface PolicyRequest {
  req: IncomingMessage;
  endpoint: PolicyEndpoint;
  /** Normalised host name (no port). */
  host: string;
  /** Normalised path (dot segments removed). */
  path: string;
  query: string;
  clientIp: string;
}

/** An answer a request policy gives instead of the origin or the cache (block, redirect, challenge). */
export interface PolicyAnswer {
  status: number;
  /** Flat [name, value, ...] list, lower-case names. */
  headers: string[];
  body: Buffer | string | null;
}

/** Request-side policy: an answer when it handles the request itself, null to let it continue. */
export type RequestPolicy = (ctx: PolicyRequest) => PolicyAnswer | null;

/**
 * What a response policy sees and may change before the head is written:
 * status, headers (a private copy; the flat list may be edited in place) and
 * body (e.g. a custom error page replaces it).
 */
export interface PolicyResponse {
  readonly req: IncomingMessage;
  readonly endpoint: PolicyEndpoint;
  readonly host: string;
  readonly path: string;
  readonly query: string;
  readonly cacheStatus: CacheStatus;
  status: number;
  headers: string[];
  body: Buffer | string | Readable | null;
}

export type ResponsePolicy = (res: PolicyResponse) => void;

/** Per-endpoint request policies, compiled from the snapshot; an empty list costs one length check per request. */
export function compileRequestPolicies(_endpoint: EndpointSnapshot): RequestPolicy[] {
  return [];
}

/** Per-endpoint response policies, compiled from the snapshot; an empty list costs one length check per answer. */
export function compileResponsePolicies(_endpoint: EndpointSnapshot): ResponsePolicy[] {
  return [];
}
