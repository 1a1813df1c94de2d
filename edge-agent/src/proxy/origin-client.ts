// Origin fetches over undici: one connection pool per origin (kept across
// snapshots while its connection settings are unchanged), an SSRF guard in the
// connector (the address actually dialled is the one checked, so DNS rebinding
// cannot slip a private address in after the check), typed errors and retries.
// Requests that stream a viewer's body (uploads) use a second, smaller pool per
// origin, so uploads that trickle in can never hold the connections cache
// misses need; their upload phase is bounded by a body-idle timeout and the
// origin's timeout_ms only starts once the body has been sent.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { Agent, buildConnector, type Dispatcher } from 'undici';
import { originAddressAllowed } from '../../../shared/src/match/cidr.ts';
import { retryAfterMs, systemClock, type Clock } from '../cache/index.ts';
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

/**
 * The viewer's request body stopped arriving for longer than the body-idle
 * timeout while it was being forwarded: the viewer gets 408, not an origin error.
 */
export class ViewerBodyTimeoutError extends Error {
  override name = 'ViewerBodyTimeoutError';
  readonly code = 'EDGE_VIEWER_BODY_TIMEOUT';
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

export interface OriginPoolOptions {
  /** Connections per origin for requests without a body (cache fills, GET/HEAD forwards). */
  connectionsPerOrigin?: number;
  /** Connections per origin for requests that stream a viewer's body; more uploads wait for one. */
  uploadConnectionsPerOrigin?: number;
  /** The wall clock request and response times are read from (an object's age; default the system's). */
  clock?: Clock;
}

export class OriginPools {
  private readonly pools = new Map<string, Agent>();
  private readonly uploads = new Map<string, Agent>();
  readonly connectionsPerOrigin: number;
  readonly uploadConnectionsPerOrigin: number;
  readonly now: Clock;

  constructor(options: OriginPoolOptions = {}) {
    this.connectionsPerOrigin = options.connectionsPerOrigin ?? 256;
    this.uploadConnectionsPerOrigin = options.uploadConnectionsPerOrigin ?? 32;
    this.now = options.clock ?? systemClock;
  }

  /** The origin's pool; upload: the separate, smaller pool for requests carrying a viewer's body. */
  get(origin: CompiledOrigin, upload = false): Agent {
    const map = upload ? this.uploads : this.pools;
    let agent = map.get(origin.poolKey);
    if (!agent) {
      agent = new Agent({
        connect: guardedConnector(origin),
        keepAliveTimeout: 30_000,
        connections: upload ? this.uploadConnectionsPerOrigin : this.connectionsPerOrigin,
        pipelining: 1,
      });
      map.set(origin.poolKey, agent);
    }
    return agent;
  }

  /** Closes pools no origin of the current snapshot uses any more. */
  retain(origins: Iterable<CompiledOrigin>): void {
    const keep = new Set<string>();
    for (const o of origins) keep.add(o.poolKey);
    for (const map of [this.pools, this.uploads]) {
      for (const [key, agent] of map) {
        if (!keep.has(key)) {
          map.delete(key);
          agent.close().catch(() => {});
        }
      }
    }
  }

  async closeAll(): Promise<void> {
    const agents = [...this.pools.values(), ...this.uploads.values()];
    this.pools.clear();
    this.uploads.clear();
    await Promise.all(agents.map((a) => a.close().catch(() => a.destroy())));
  }
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

/** A failure of an origin request or of reading its body, typed (the status the viewer gets follows from it). */
export function classifyOriginError(err: unknown): OriginError | ViewerBodyTimeoutError {
  if (err instanceof OriginError || err instanceof ViewerBodyTimeoutError) return err;
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
  /** A stream is a viewer's body: it goes through the upload pool, never retried. */
  body?: Readable | Buffer | null;
  /** Upload phase: the body may pause at most this long between chunks (0: no limit). */
  bodyIdleTimeoutMs?: number;
  signal?: AbortSignal;
  /** The wait for the response head and between body chunks, instead of the origin's timeout_ms (without a body only). */
  timeoutMs?: number;
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

/** The longest wait between two attempts: the backoff's cap, and the longest Retry-After a retry waits for. */
const RETRY_WAIT_MAX_MS = 1000;

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}

function statusRetryClass(status: number): string | null {
  // A loop (loop.ts) answers the same however often it is asked: retrying one multiplies it at every pass.
  if (status === 508) return null;
  if (status >= 500) return '5xx';
  if (status === 429) return '429';
  if (status === 408) return '408';
  return null;
}

/**
 * One origin request with the origin's retry policy. Retries happen only for
 * idempotent methods sent without a body, on the classes in retry_on. A body
 * stream is an upload: it goes through the origin's upload pool, may pause at
 * most bodyIdleTimeoutMs between chunks (ViewerBodyTimeoutError), and the
 * origin's timeout_ms counts from the end of the body rather than from dispatch.
 * Throws OriginError or ViewerBodyTimeoutError (or the signal's reason when
 * the caller aborts).
 */
export async function fetchOrigin(pools: OriginPools, origin: CompiledOrigin, req: OriginRequest, onTiming?: (ms: number, status: number) => void): Promise<OriginResponse> {
  if (req.body instanceof Readable) return upload(pools, origin, req, req.body, onTiming);
  const o = origin.snapshot;
  const retryable = IDEMPOTENT.has(req.method) && (req.body === undefined || req.body === null);
  const attempts = 1 + (retryable ? o.max_retries : 0);
  const agent = pools.get(origin);
  let lastError: OriginError | ViewerBodyTimeoutError | null = null;
  let askedWaitMs = 0;
  for (let attempt = 0; attempt < attempts; attempt++) {
    if (attempt > 0) await sleep(Math.max(askedWaitMs, Math.min(RETRY_WAIT_MAX_MS, 25 * 2 ** (attempt - 1))));
    const requestTimeMs = pools.now();
    const waitMs = req.timeoutMs ?? o.timeout_ms;
    const head = headDeadline(waitMs, req.signal);
    try {
      const res = await agent.request({
        origin: origin.url,
        path: req.path,
        method: req.method as Dispatcher.HttpMethod,
        headers: req.headers,
        body: req.body ?? null,
        // undici's own timers tick every half second (its "fast timers": a 500 ms wait ended after about a second, and
        // one may end up to a tick early): the head is waited for by headDeadline, undici's a tick later as a backstop.
        headersTimeout: waitMs + UNDICI_TICK_MS,
        bodyTimeout: waitMs,
        signal: head.signal,
        onInfo: req.onInfo,
      });
      head.clear();
      const responseTimeMs = pools.now();
      onTiming?.(responseTimeMs - requestTimeMs, res.statusCode);
      const cls = statusRetryClass(res.statusCode);
      if (cls !== null && attempt + 1 < attempts && origin.retryOn.has(cls)) {
        // Retry-After (seconds or an HTTP-date; an invalid one is ignored) is honoured up to the longest
        // wait between retries; an origin asking for longer gets no retry, and its answer goes to the viewer.
        const asked = retryAfterMs(headerValue(res.headers['retry-after']));
        if (asked === null || asked <= RETRY_WAIT_MAX_MS) {
          askedWaitMs = asked ?? 0;
          await res.body.dump().catch(() => {});
          continue;
        }
      }
      return { statusCode: res.statusCode, headers: res.headers, body: res.body, requestTimeMs, responseTimeMs };
    } catch (err) {
      head.clear();
      if (req.signal?.aborted && err === req.signal.reason) throw err;
      lastError = classifyOriginError(err);
      const retryClass = lastError instanceof OriginError && (lastError.kind === 'connect_failure' || lastError.kind === 'dns_failure' || (lastError.kind === 'timeout' && (err as { code?: string }).code === 'UND_ERR_CONNECT_TIMEOUT')) ? 'connect_failure' : null;
      if (retryClass === null || !origin.retryOn.has(retryClass) || req.signal?.aborted) break;
    }
  }
  throw lastError ?? new OriginError('protocol', 'origin request failed');
}

/**
 * Passes a viewer's body through, failing it with ViewerBodyTimeoutError when
 * no chunk arrives for idleMs while the origin side is reading. One timer per
 * upload, re-armed only when it fires early (no timer churn per chunk).
 */
class UploadBody extends Transform {
  private lastChunkAt = performance.now();
  private timer: NodeJS.Timeout | null = null;
  private readonly idleMs: number;
  timedOut = false;

  constructor(idleMs: number) {
    super();
    this.idleMs = idleMs;
    // Its errors reach undici while it sends the body; one after that (the viewer leaving a finished or
    // abandoned upload) has nobody left to tell.
    this.on('error', () => {});
    if (idleMs > 0) this.arm(idleMs);
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => {
      const now = performance.now();
      // Idle time counts only while the origin side reads and nothing is buffered: an upload queued for a
      // connection, or paused because the origin reads slowly, is not the viewer's fault.
      if (this.readableFlowing !== true || this.readableLength > 0 || this.writableLength > 0) {
        this.lastChunkAt = now;
        return this.arm(this.idleMs);
      }
      const idle = now - this.lastChunkAt;
      if (idle < this.idleMs) return this.arm(this.idleMs - idle);
      this.timedOut = true;
      this.destroy(new ViewerBodyTimeoutError(`request body idle for ${this.idleMs} ms`));
    }, ms);
    this.timer.unref();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.lastChunkAt = performance.now();
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    this.stop();
    cb();
  }

  override _destroy(err: Error | null, cb: (error?: Error | null) => void): void {
    this.stop();
    cb(err);
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}

async function upload(pools: OriginPools, origin: CompiledOrigin, req: OriginRequest, source: Readable, onTiming?: (ms: number, status: number) => void): Promise<OriginResponse> {
  const timeoutMs = origin.snapshot.timeout_ms;
  const body = new UploadBody(req.bodyIdleTimeoutMs ?? 0);
  // The viewer's stream feeds the guard; a viewer that goes away fails the guard and so the origin request.
  source.on('error', (err) => body.destroy(err));
  source.on('close', () => { if (!source.readableEnded) body.destroy(new Error('the viewer closed the connection during the upload')); });
  source.pipe(body);
  // timeout_ms for the origin's answer starts when the whole body has been handed over.
  const answered = new AbortController();
  let responseTimer: NodeJS.Timeout | null = null;
  body.once('end', () => {
    responseTimer = setTimeout(() => answered.abort(new OriginError('timeout', `origin sent no response headers within ${timeoutMs} ms of the request body`)), timeoutMs);
    responseTimer.unref();
  });
  const signal = req.signal ? AbortSignal.any([req.signal, answered.signal]) : answered.signal;
  const requestTimeMs = pools.now();
  try {
    const res = await pools.get(origin, true).request({
      origin: origin.url,
      path: req.path,
      method: req.method as Dispatcher.HttpMethod,
      headers: req.headers,
      body,
      headersTimeout: 0,
      bodyTimeout: timeoutMs,
      signal,
      onInfo: req.onInfo,
    });
    const responseTimeMs = pools.now();
    onTiming?.(responseTimeMs - requestTimeMs, res.statusCode);
    return { statusCode: res.statusCode, headers: res.headers, body: res.body, requestTimeMs, responseTimeMs };
  } catch (err) {
    body.stop();
    source.unpipe(body);
    if (body.timedOut) throw new ViewerBodyTimeoutError(`request body idle for ${req.bodyIdleTimeoutMs} ms`, { cause: err });
    if (req.signal?.aborted && err === req.signal.reason) throw err;
    throw classifyOriginError(err);
  } finally {
    // The body may still be streaming (an origin can answer before reading all of it): its idle guard stays.
    if (responseTimer !== null) clearTimeout(responseTimer);
  }
}

/** Past a wait of undici's own timers (lib/util/timers.js ticks every 499 ms and checks them then). */
const UNDICI_TICK_MS = 1000;

/**
 * The wait for an origin's response head, on a timer of the process's own (to the millisecond, unlike undici's
 * half-second ticks): its signal (with the caller's) aborts the request with OriginError('timeout') once `ms`
 * have passed since dispatch; clear() once the head has arrived (the body then streams on without it).
 */
function headDeadline(ms: number, outer: AbortSignal | undefined): { signal: AbortSignal; clear: () => void } {
  const own = new AbortController();
  const timer = setTimeout(() => own.abort(new OriginError('timeout', `origin sent no response headers within ${ms} ms`)), ms);
  timer.unref();
  return { signal: outer ? AbortSignal.any([outer, own.signal]) : own.signal, clear: () => clearTimeout(timer) };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref());
}
