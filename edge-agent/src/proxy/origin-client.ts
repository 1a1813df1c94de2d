// Origin fetches over undici: one connection pool per origin (kept across
// snapshots while its connection settings are unchanged), an SSRF guard in the
// connector (the address actually dialled is the one checked, so DNS rebinding
// cannot slip a private address in after the check), typed errors and retries.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Readable } from 'node:stream';
import { Agent, buildConnector, type Dispatcher } from 'undici';
import { originAddressAllowed } from '../../../shared/src/match/cidr.ts';
import type { CompiledOrigin } from './routing.ts';

export type OriginErrorKind = 'connect_failure' | 'dns_failure' | 'ssrf_refused' | 'timeout' | 'protocol';

/** A failed origin fetch, with the status the viewer gets: 502 for failures to reach it, 504 for timeouts. */
export class OriginError extends Error {
  readonly kind: OriginErrorKind;
  readonly status: 502 | 504;
  constructor(kind: OriginErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OriginError';
    this.kind = kind;
    this.status = kind === 'timeout' ? 504 : 502;
  }
}

class SsrfRefusedError extends Error {
  readonly code = 'EDGE_SSRF_REFUSED';
}

function guardedConnector(origin: CompiledOrigin): buildConnector.connector {
  const o = origin.snapshot;
  const base = buildConnector({ timeout: o.connect_timeout_ms, rejectUnauthorized: o.verify_tls, keepAlive: true, noDelay: true } as buildConnector.BuildOptions);
  // Only an operator who allowed private networks and switched ssrf_protection off gets an unguarded connector.
  if (o.allow_private_network && !o.ssrf_protection) return base;
  return (opts, cb) => {
    const host = opts.hostname.startsWith('[') ? opts.hostname.slice(1, -1) : opts.hostname;
    const resolve = isIP(host) ? Promise.resolve([host]) : lookup(host, { all: true, verbatim: true }).then((rs) => rs.map((r) => r.address));
    resolve.then(
      (addresses) => {
        const allowed = addresses.find((a) => originAddressAllowed(a, o.allow_private_network, o.ssrf_protection));
        if (allowed === undefined) {
          cb(new SsrfRefusedError(`origin ${host} resolves only to addresses this origin may not use (${addresses.join(', ')})`), null);
          return;
        }
        const servername = isIP(host) ? undefined : (opts.servername ?? host);
        base({ ...opts, hostname: allowed, servername }, cb);
      },
      (err: unknown) => cb(err as Error, null),
    );
  };
}

export class OriginPools {
  private readonly pools = new Map<string, Agent>();

  get(origin: CompiledOrigin): Agent {
    let agent = this.pools.get(origin.poolKey);
    if (!agent) {
      agent = new Agent({
        connect: guardedConnector(origin),
        keepAliveTimeout: 30_000,
        connections: 256,
        pipelining: 1,
      });
      this.pools.set(origin.poolKey, agent);
    }
    return agent;
  }

  /** Closes pools no origin of the current snapshot uses any more. */
  retain(origins: Iterable<CompiledOrigin>): void {
    const keep = new Set<string>();
    for (const o of origins) keep.add(o.poolKey);
    for (const [key, agent] of this.pools) {
      if (!keep.has(key)) {
        this.pools.delete(key);
        agent.close().catch(() => {});
      }
    }
  }

  async closeAll(): Promise<void> {
    const agents = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(agents.map((a) => a.close().catch(() => a.destroy())));
  }
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

function classify(err: unknown): OriginError {
  if (err instanceof OriginError) return err;
  const e = err as { code?: string; message?: string; name?: string };
  const code = e?.code ?? '';
  const message = e?.message ?? String(err);
  if (e instanceof SsrfRefusedError || code === 'EDGE_SSRF_REFUSED') return new OriginError('ssrf_refused', message, { cause: err });
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'ETIMEDOUT' || e?.name === 'TimeoutError') {
    return new OriginError('timeout', message, { cause: err });
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_FAIL' || code === 'EAI_NODATA') return new OriginError('dns_failure', message, { cause: err });
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'EPIPE' || code === 'UND_ERR_SOCKET' || code === 'UND_ERR_CLOSED') {
    return new OriginError('connect_failure', message, { cause: err });
  }
  return new OriginError('protocol', message, { cause: err });
}

export interface OriginRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
  body?: Readable | Buffer | null;
  signal?: AbortSignal;
  /** Interim (1xx) responses from the origin, e.g. 103 Early Hints. */
  onInfo?: (info: { statusCode: number; headers: Record<string, string | string[]> }) => void;
}

export interface OriginResponse {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
  requestTimeMs: number;
  responseTimeMs: number;
}

function statusRetryClass(status: number): string | null {
  if (status >= 500) return '5xx';
  if (status === 429) return '429';
  if (status === 408) return '408';
  return null;
}

/**
 * One origin request with the origin's retry policy. Retries happen only for
 * idempotent methods sent without a body, on the classes in retry_on.
 */
export async function fetchOrigin(pools: OriginPools, origin: CompiledOrigin, req: OriginRequest, onTiming?: (ms: number, status: number) => void): Promise<OriginResponse> {
  const o = origin.snapshot;
  const retryable = IDEMPOTENT.has(req.method) && (req.body === undefined || req.body === null);
  const attempts = 1 + (retryable ? o.max_retries : 0);
  const agent = pools.get(origin);
  let lastError: OriginError | null = null;
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (attempt > 0) await sleep(Math.min(1000, 25 * 2 ** (attempt - 1)));
    const requestTimeMs = Date.now();
    try {
      const res = await agent.request({
        origin: origin.url,
        path: req.path,
        method: req.method as Dispatcher.HttpMethod,
        headers: req.headers,
        body: req.body ?? null,
        headersTimeout: o.timeout_ms,
        bodyTimeout: o.timeout_ms,
        signal: req.signal,
        onInfo: req.onInfo,
      });
      const responseTimeMs = Date.now();
      onTiming?.(responseTimeMs - requestTimeMs, res.statusCode);
      const cls = statusRetryClass(res.statusCode);
      if (cls !== null && attempt + 1 < attempts && origin.retryOn.has(cls)) {
        await res.body.dump().catch(() => {});
        continue;
      }
      return { statusCode: res.statusCode, headers: res.headers, body: res.body, requestTimeMs, responseTimeMs };
    } catch (err) {
      lastError = classify(err);
      const retryClass = lastError.kind === 'connect_failure' || lastError.kind === 'dns_failure' || (lastError.kind === 'timeout' && (err as { code?: string }).code === 'UND_ERR_CONNECT_TIMEOUT') ? 'connect_failure' : null;
      if (retryClass === null || !origin.retryOn.has(retryClass) || req.signal?.aborted) break;
    }
  }
  throw lastError ?? new OriginError('protocol', 'origin request failed');
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
