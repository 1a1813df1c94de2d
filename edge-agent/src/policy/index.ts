// Edge policies (DESIGN.md §8). Request-side policies run between endpoint
// lookup and the cache (IP rules → geo restriction → signed URLs → redirect
// rules: ip-rules.ts, geo.ts, signed-urls.ts, redirects.ts) and may answer the
// request themselves; response-side policies (header policies, compression,
// custom error pages) run on every answer of the endpoint, in the proxy's
// single exit, before the head is written. Both are compiled once per
// configuration, per endpoint (request-policies.ts for the request side,
// response-shaping.ts for the response side, so the policies can import this
// file's types without an import circle).
import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { CacheStatus } from '../metrics/traffic.ts';
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import type { ClientAddress } from './client-address.ts';

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
  /**
   * The query as the request continues: a policy may take out parameters it
   * consumed (the signed-URL check removes its token and expiry), and the cache
   * key and the origin request are made from what is left.
   */
  query: string;
  /** The query as the viewer sent it. */
  readonly rawQuery: string;
  /**
   * A prefix token the viewer's path carried as a segment `<token_param>=<token>`
   * (signed-urls.ts takePathToken: already out of `path`, before routing); value
   * null when undecodable or sent twice.
   */
  readonly pathToken?: { name: string; value: string | null } | null;
  /** The viewer's Cookie field as it continues: the signed-URL check takes its token cookies out, and the rest is forwarded. */
  cookie?: string;
  /** The viewer's address (client-address.ts: the socket's, or the trusted proxy's header), null when unknown. */
  readonly client: ClientAddress | null;
  /** Its canonical text ('' when unknown). */
  readonly clientIp: string;
  /** The viewer came over TLS (to this socket, or to the trusted proxy that says so). */
  readonly secure: boolean;
  /** The id of the route the request matched ('' for the endpoint's default route). */
  readonly routeId: string;
  /** The port redirects to HTTPS name: the agent's HTTPS listener (or HTTPS_PUBLIC_PORT); absent, null or 443: the default. */
  readonly httpsPort?: number | null;
}

/** Why a policy refused a request: for the access record and metrics, never shown to the viewer. */
export interface PolicyDenial {
  policy: string;
  reason: string;
}

/** An answer a request policy gives instead of the origin or the cache (block, redirect, challenge). */
export interface PolicyAnswer {
  status: number;
  /** Flat [name, value, ...] list, lower-case names. */
  headers: string[];
  body: Buffer | string | null;
  /** Set when the answer refuses the request. */
  denial?: PolicyDenial;
}

/** Request-side policy: an answer when it handles the request itself, null to let it continue. */
export type RequestPolicy = (ctx: PolicyRequest) => PolicyAnswer | null;

/**
 * What a generic response hook (ResponsePolicies.hooks, run after the
 * endpoint's error pages, compression and header policy) sees and may change
 * before the head is written: status, headers (a private copy; the flat list
 * may be edited in place) and body.
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
