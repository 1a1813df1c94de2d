// The HTTP/2 side of the HTTPS listener: connections whose TLS handshake chose
// h2 by ALPN (only names whose endpoint's http_version allows it are offered
// h2; there is no h2c) are served through Node's HTTP/2 compatibility API by
// the same request path as HTTP/1.1 (proxy.ts: its request and response
// objects behave alike; the few HTTP/1.1-only steps check the version).
// Sessions idle for 65 s are closed (as keep-alive connections are), each
// session takes at most 128 concurrent streams (nginx's default), and on
// shutdown every session is sent GOAWAY so requests under way finish and no
// new ones start.
// Rapid reset (CVE-2023-44487): a stream the viewer resets keeps its slot
// while work it started (a cache fill) still runs, so resets cannot start more
// origin work than the stream limit allows; a stream beyond it is refused
// (REFUSED_STREAM, safe to retry). A session that resets more than
// RESET_BURST streams (refilled at RESET_RATE a second) gets GOAWAY from
// nghttp2 itself (Node's streamResetBurst / streamResetRate).
import http2, { type Http2Session, type Http2Server } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';

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

/** Slots of a session taken: open streams and closed ones whose work still runs. */
const busy = new WeakMap<Http2Session, { slots: number }>();

/**
 * Http2ServerResponse with a working `destroyed` (node:http's responses have it, and the request path reads it to
 * notice a viewer who left; Node's HTTP/2 compatibility response leaves it undefined though its typings declare it).
 */
class EdgeHttp2Response extends http2.Http2ServerResponse {}
Object.defineProperty(EdgeHttp2Response.prototype, 'destroyed', {
  get(this: http2.Http2ServerResponse) {
    const stream = this.stream as http2.ServerHttp2Stream | undefined;
    return stream === undefined || stream.destroyed;
  },
});

/**
 * Takes a slot of the request's session for it, released when its stream has closed and the work held for it
 * settled; false (the stream refused) when every slot is taken.
 */
function takeSlot(req: http2.Http2ServerRequest): boolean {
  const stream = req.stream;
  const count = busy.get(stream.session!);
  if (count === undefined) return true;
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
  (req as unknown as { [STREAM_SLOT]: SlotHolder })[STREAM_SLOT] = (work) => {
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

  constructor(handler: (req: IncomingMessage, res: ServerResponse) => void) {
    this.server = http2.createServer({
      settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS },
      streamResetBurst: RESET_BURST,
      streamResetRate: RESET_RATE,
      Http2ServerResponse: EdgeHttp2Response as typeof http2.Http2ServerResponse,
    }, (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
      if (!takeSlot(req)) return;
      handler(req as unknown as IncomingMessage, res as unknown as ServerResponse);
    });
    this.server.on('session', (session: Http2Session) => {
      busy.set(session, { slots: 0 });
      this.sessions.add(session);
      session.once('close', () => this.sessions.delete(session));
      session.setTimeout(IDLE_SESSION_MS, () => session.close());
      // A session error (a broken connection, a protocol violation by the viewer) ends that session only.
      session.on('error', () => {});
    });
  }

  /** Open sessions (tests). */
  get sessionCount(): number {
    return this.sessions.size;
  }

  /** GOAWAY to every session: streams under way finish, then the session closes; what is left after timeoutMs is cut. */
  close(timeoutMs: number): Promise<void> {
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
