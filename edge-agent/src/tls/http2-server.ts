// The HTTP/2 side of the HTTPS listener: connections whose TLS handshake chose
// h2 by ALPN (only names whose endpoint's http_version allows it are offered
// h2; there is no h2c) are served on Node's core stream API (the 'stream'
// event, stream.respond / stream.end), not its compatibility layer, by the same
// request path as HTTP/1.1: each stream is handed over as a small request and
// response pair (Http2Request, Http2Response) with exactly the part of
// IncomingMessage and ServerResponse the request path uses (proxy.ts; the few
// HTTP/1.1-only steps check the version; a viewer's body and a streamed answer
// go through the stream itself: viewerBody, viewerSink in exchange.ts). The
// compatibility layer cost about as much again as the core API per small hit
// (bench/results/edge-cache-hit.md, 2026-12-03 profile).
// Sessions idle for 65 s (no stream open, none started) are closed, as
// keep-alive connections are, by a sweep four times per idle time (Node's
// session timeout would refresh a timer on every frame written), each
// session takes at most 128 concurrent streams (nginx's default), and on
// shutdown every session is sent GOAWAY so requests under way finish and no
// new ones start.
// Rapid reset (CVE-2023-44487): a stream the viewer resets keeps its slot
// while work it started (a cache fill) still runs, so resets cannot start more
// origin work than the stream limit allows; a stream beyond it is refused
// (REFUSED_STREAM, safe to retry). A session that resets more than
// RESET_BURST streams (refilled at RESET_RATE a second) gets GOAWAY from
// nghttp2 itself (Node's streamResetBurst / streamResetRate).
import http2, { type Http2Session, type Http2Server, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';

const IDLE_SESSION_MS = 65_000;
export const MAX_CONCURRENT_STREAMS = 128;
/** Resets a session may send at once: twice its stream limit (nginx bounds new streams per event-loop turn the same way). */
export const RESET_BURST = MAX_CONCURRENT_STREAMS / 2;
/** Resets a second once the burst is spent (nghttp2's default rate). */
export const RESET_RATE = 33;

const STREAM_SLOT = Symbol('the stream slot of an HTTP/2 request');
type SlotHolder = (work: Promise<unknown>) => void;

/**
 * Keeps the HTTP/2 stream's slot of its session taken until `work` (started for this request: a cache fill)
 * settles, even after the stream closed or was reset. A no-op for HTTP/1.1 requests.
 */
export function holdStreamSlot(req: IncomingMessage, work: Promise<unknown>): void {
  (req as IncomingMessage & { [STREAM_SLOT]?: SlotHolder })[STREAM_SLOT]?.(work);
}

/**
 * Per session: slots taken (open streams and closed ones whose work still runs), the TLS connection it runs on,
 * and the idle sweeps it has been through without a stream (reset by each new stream).
 */
interface SessionState { slots: number; socket: TLSSocket; quiet: number }
const busy = new WeakMap<Http2Session, SessionState>();
/** Sweeps per idle time: a session is closed after this many in a row without a stream (1 to 1.25 idle times). */
const SWEEPS = 4;

/** The request of one stream, as the request path reads an IncomingMessage (the body is the stream: viewerBody). */
export class Http2Request {
  readonly stream: ServerHttp2Stream;
  /** Node's header object of the stream (pseudo-headers included; cookies joined), as the compatibility layer gave it. */
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: string[];
  readonly method: string;
  readonly url: string | undefined;
  /** The TLS connection the session runs on (encrypted, servername, remoteAddress, getProtocol). */
  readonly socket: TLSSocket;
  declare readonly httpVersion: string;
  declare readonly httpVersionMajor: number;
  declare readonly httpVersionMinor: number;
  [STREAM_SLOT]?: SlotHolder;

  constructor(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, rawHeaders: string[], socket: TLSSocket) {
    this.stream = stream;
    this.headers = headers;
    this.rawHeaders = rawHeaders;
    this.method = headers[':method'] as string;
    this.url = headers[':path'] as string | undefined;
    this.socket = socket;
  }

  get readableEnded(): boolean {
    return this.stream.readableEnded;
  }

  /** The body arrived whole, or never will (the stream is gone). */
  get complete(): boolean {
    return this.stream.readableEnded || this.stream.destroyed;
  }

  /** Drains a body nobody reads. */
  resume(): this {
    this.stream.resume();
    return this;
  }
}
Object.defineProperties(Http2Request.prototype, { httpVersion: { value: '2.0' }, httpVersionMajor: { value: 2 }, httpVersionMinor: { value: 0 } });

/** Fields HTTP/2 forbids (RFC 9113 §8.2.2): the compatibility layer dropped them, stream.respond refuses them. */
const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'http2-settings']);

/**
 * The answer on one stream, as the request path writes a ServerResponse: writeHead(status, flat field list) sends
 * the HEADERS frame (stream.respond, no trailers), end(body) the body; a streamed body goes into the stream itself
 * (viewerSink). 'close' listeners are the stream's.
 */
export class Http2Response {
  readonly stream: ServerHttp2Stream;

  constructor(stream: ServerHttp2Stream) {
    this.stream = stream;
  }

  get headersSent(): boolean {
    return this.stream.headersSent;
  }

  get destroyed(): boolean {
    return this.stream.destroyed;
  }

  /** The answer was ended by the request path (a stream cut before that is ended by Node too, and marked aborted). */
  get writableEnded(): boolean {
    const stream = this.stream;
    return stream.writableEnded && !stream.aborted;
  }

  writeHead(status: number, headers: string[]): this {
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return this;
    const fields: (string | number)[] = [':status', status, ...headers];
    try {
      stream.respond(fields as unknown as string[]);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ERR_HTTP2_INVALID_CONNECTION_HEADERS') throw err;
      stream.respond(withoutConnectionFields(fields) as unknown as string[]);
    }
    return this;
  }

  end(body?: Buffer | Uint8Array | string): this {
    if (body === undefined) this.stream.end();
    else this.stream.end(body);
    return this;
  }

  destroy(): this {
    this.stream.destroy();
    return this;
  }

  once(event: 'close', listener: () => void): this {
    this.stream.once(event, listener);
    return this;
  }

  off(event: 'close', listener: () => void): this {
    this.stream.off(event, listener);
    return this;
  }
}

function withoutConnectionFields(fields: (string | number)[]): (string | number)[] {
  const out: (string | number)[] = [];
  for (let i = 0; i < fields.length; i += 2) if (!CONNECTION_SPECIFIC.has(fields[i] as string)) out.push(fields[i]!, fields[i + 1]!);
  return out;
}

function noop(): void {}

/**
 * Takes a slot of the stream's session for its request, released when the stream has closed and the work held for
 * it settled; false (the stream refused) when every slot is taken.
 */
function takeSlot(stream: ServerHttp2Stream, req: Http2Request, count: { slots: number }): boolean {
  if (count.slots >= MAX_CONCURRENT_STREAMS) {
    stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    return false;
  }
  count.slots++;
  let taken = true;
  let held = 0;
  let closed = false;
  // The slot is needed while the stream is open or work held for it runs (work may start after a reset).
  const update = () => {
    const needed = !closed || held > 0;
    if (needed !== taken) count.slots += needed ? 1 : -1;
    taken = needed;
  };
  stream.once('close', () => {
    closed = true;
    update();
  });
  req[STREAM_SLOT] = (work) => {
    held++;
    update();
    const settle = () => {
      held--;
      update();
    };
    work.then(settle, settle);
  };
  return true;
}

export class Http2Listener {
  readonly server: Http2Server;
  private readonly sessions = new Set<Http2Session>();
  /** The connection being handed to the server (its 'session' event comes meanwhile). */
  private handingOver: TLSSocket | null = null;
  private sweeper: NodeJS.Timeout | null = null;

  /** idleSessionMs: how long a session without streams stays open (tests shorten it). */
  constructor(handler: (req: IncomingMessage, res: ServerResponse) => void, idleSessionMs = IDLE_SESSION_MS) {
    this.server = http2.createServer({
      settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS },
      streamResetBurst: RESET_BURST,
      streamResetRate: RESET_RATE,
    });
    this.server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
      // A stream error (a reset by the viewer, a body cut off) ends that stream only; its 'close' says so.
      stream.on('error', noop);
      const session = stream.session;
      const count = session === undefined ? undefined : busy.get(session);
      if (count === undefined) return;
      count.quiet = 0;
      const req = new Http2Request(stream, headers, rawHeaders, count.socket);
      if (!takeSlot(stream, req, count)) return;
      // As node:http and the compatibility layer: a viewer waiting to send its body is told to go on.
      if (headers.expect === '100-continue') stream.additionalHeaders({ ':status': 100 });
      handler(req as unknown as IncomingMessage, new Http2Response(stream) as unknown as ServerResponse);
    });
    this.server.on('session', (session: Http2Session) => {
      // Emitted while the connection is handed over (emit below): session.socket is a proxy that throws once the
      // connection is gone, and the request path reads the viewer's address even then (access records).
      busy.set(session, { slots: 0, socket: this.handingOver!, quiet: 0 });
      this.sessions.add(session);
      session.once('close', () => this.sessions.delete(session));
      this.sweeper ??= setInterval(() => this.sweep(), idleSessionMs / SWEEPS).unref();
      // A session error (a broken connection, a protocol violation by the viewer) ends that session only.
      session.on('error', () => {});
    });
  }

  /** Takes a TLS connection whose ALPN chose h2 (the HTTPS listener's sink). */
  emit(event: 'connection', socket: TLSSocket): boolean {
    this.handingOver = socket;
    try {
      return this.server.emit(event, socket);
    } finally {
      this.handingOver = null;
    }
  }

  /** Closes the sessions that had no stream open or started for SWEEPS sweeps in a row (GOAWAY, as at shutdown). */
  private sweep(): void {
    for (const session of this.sessions) {
      const state = busy.get(session)!;
      if (state.slots > 0) state.quiet = 0;
      else if (++state.quiet > SWEEPS) session.close();
    }
  }

  /** Open sessions (tests). */
  get sessionCount(): number {
    return this.sessions.size;
  }

  /** GOAWAY to every session: streams under way finish, then the session closes; what is left after timeoutMs is cut. */
  close(timeoutMs: number): Promise<void> {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    this.sweeper = null;
    if (this.sessions.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
        resolve();
      }, timeoutMs);
      timer.unref();
      let left = this.sessions.size;
      for (const s of this.sessions) {
        s.once('close', () => {
          if (--left === 0) {
            clearTimeout(timer);
            resolve();
          }
        });
        s.close();
      }
    });
  }
}
