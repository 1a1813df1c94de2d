// The HTTP/2 side of the HTTPS listener: connections whose TLS handshake chose
// h2 by ALPN (only names whose endpoint's http_version allows it are offered
// h2; there is no h2c) are served through Node's HTTP/2 compatibility API by
// the same request path as HTTP/1.1 (proxy.ts: its request and response
// objects behave alike; the few HTTP/1.1-only steps check the version).
// Sessions idle for 65 s are closed (as keep-alive connections are), each
// session takes at most 128 concurrent streams (nginx's default), and on
// shutdown every session is sent GOAWAY so requests under way finish and no
// new ones start.
import http2, { type Http2Session, type Http2Server } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';

const IDLE_SESSION_MS = 65_000;
const MAX_CONCURRENT_STREAMS = 128;

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

export class Http2Listener {
  readonly server: Http2Server;
  private readonly sessions = new Set<Http2Session>();

  constructor(handler: (req: IncomingMessage, res: ServerResponse) => void) {
    this.server = http2.createServer({
      settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS },
      Http2ServerResponse: EdgeHttp2Response as typeof http2.Http2ServerResponse,
    }, handler as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
    this.server.on('session', (session: Http2Session) => {
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
