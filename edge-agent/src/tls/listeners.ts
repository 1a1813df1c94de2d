// An agent process's listeners: the plaintext HTTP/1.1 listener, the HTTPS
// listener (listener.ts: HTTP/1.1 through the same HTTP server, HTTP/2 through
// http2-server.ts), a loopback listener of the process alone (prefetches), and
// /metrics with /healthz. Every viewer listener answers through one request
// handler (the proxy's); closing stops accepting and lets requests under way
// finish within a grace.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { CertificateTable } from './certificates.ts';
import { Http2Listener } from './http2-server.ts';
import { HttpsListener } from './listener.ts';

export interface ListenOptions {
  /** One of several worker processes listening on this port (SO_REUSEPORT, each with a socket of its own). */
  shared?: boolean;
  /** TLS session ticket keys (48 bytes) shared by the workers, so a session resumes whichever worker takes the connection. */
  ticketKeys?: Buffer;
}

/** What /metrics and /healthz show. */
export interface MetricsViews {
  metrics: () => Promise<string>;
  contentType: string;
  /** The health view; status `unauthorized` answers 503. */
  health: () => Record<string, unknown>;
}

export interface ListenersOptions {
  /** The request path every viewer listener answers through. */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  certificates: CertificateTable;
  logger: Logger;
  /** Time a viewer has to send the request head (and, over TLS, to finish the handshake). */
  requestHeadersTimeoutMs: number;
  /** Time a viewer has to send the whole request (0: no limit). */
  requestTimeoutMs: number;
  onHandshakeFailure: (reason: string) => void;
}

const sharedPort = (options: ListenOptions) => (options.shared ? { reusePort: true, exclusive: true } : {});

export class Listeners {
  readonly #o: ListenersOptions;
  #http: Server | null = null;
  /** Whether the plaintext listener listens (the HTTP server may serve only TLS connections). */
  #plaintext = false;
  #https: HttpsListener | null = null;
  #http2: Http2Listener | null = null;
  #private: Server | null = null;
  #metrics: Server | null = null;
  #httpsPort: number | null = null;

  constructor(options: ListenersOptions) {
    this.#o = options;
  }

  /** The port of the HTTPS listener once it listens (null before). */
  get httpsPort(): number | null {
    return this.#httpsPort;
  }

  /** The address to reach this process's own request path at: its private listener, else the plaintext one (null: none). */
  get ownAddress(): AddressInfo | null {
    if (this.#private !== null) return this.#private.address() as AddressInfo;
    return this.#plaintext ? this.#http?.address() as AddressInfo | null : null;
  }

  /** shared: a worker's listener, one of several processes on the same port (SO_REUSEPORT: the kernel spreads connections). */
  async listen(port: number, host: string, options: ListenOptions = {}): Promise<AddressInfo> {
    const server = this.#httpServer();
    const address = await this.#dualStack(host, (h, extra) => new Promise<AddressInfo>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port, host: h, ...extra, ...sharedPort(options) }, () => {
        server.off('error', reject);
        resolve(server.address() as AddressInfo);
      });
    }));
    this.#plaintext = true;
    return address;
  }

  /**
   * The HTTPS listener (listener.ts): certificates by SNI from the configuration in force and the default
   * certificate, each name with its endpoint's TLS settings; HTTP/1.1 through the same request path.
   */
  async listenHttps(port: number, host: string, options: ListenOptions = {}): Promise<AddressInfo> {
    const o = this.#o;
    const listener = new HttpsListener({
      ticketKeys: options.ticketKeys,
      table: o.certificates,
      http1: this.#httpServer(),
      http2: (this.#http2 ??= new Http2Listener(o.handler)),
      handshakeTimeoutMs: o.requestHeadersTimeoutMs,
      logger: o.logger,
      onHandshakeFailure: o.onHandshakeFailure,
    });
    const address = await this.#dualStack(host, (h, extra) => listener.listen(port, h, { ...extra, ...sharedPort(options) }));
    this.#https = listener;
    this.#httpsPort ??= address.port;
    return address;
  }

  /**
   * A loopback listener of this process alone (a worker's: its public listeners share their port with the other
   * workers, so a request to them may reach another worker's cache). Prefetches go through it.
   */
  async listenPrivate(): Promise<AddressInfo> {
    const server = this.#newHttpServer();
    await listenOn(server, 0, '127.0.0.1');
    this.#private = server;
    return server.address() as AddressInfo;
  }

  /** /metrics and /healthz (anything else: 404). */
  async listenMetrics(port: number, host: string, views: MetricsViews): Promise<AddressInfo> {
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/metrics') {
        views.metrics().then(
          (text) => {
            res.writeHead(200, { 'content-type': views.contentType });
            res.end(text);
          },
          (err: Error) => {
            res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(err.message);
          },
        );
      } else if (path === '/healthz') {
        const view = views.health();
        res.writeHead(view.status === 'unauthorized' ? 503 : 200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify(view));
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found\n');
      }
    });
    this.#metrics = server;
    await listenOn(server, port, host);
    return server.address() as AddressInfo;
  }

  /** New TLS session ticket keys for the HTTPS listener (the primary rotates the workers' shared keys). */
  setTicketKeys(keys: Buffer): void {
    this.#https?.setTicketKeys(keys);
  }

  /** The default certificate changed: the next handshakes use it, open connections keep theirs. */
  defaultCertificateChanged(): void {
    this.#https?.defaultCertificateChanged();
  }

  /** Stops accepting and lets requests under way finish (open connections are closed after timeoutMs). */
  async close(timeoutMs: number): Promise<void> {
    await this.#https?.close();
    const h2Closed = this.#http2?.close(timeoutMs);
    const servers = [this.#http, this.#private, this.#metrics].filter((s): s is Server => s !== null);
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => {
      const timer = setTimeout(() => s.closeAllConnections(), timeoutMs);
      timer.unref();
      // A keep-alive connection whose request finishes during shutdown turns idle
      // later: keep closing idle connections so close() does not wait for the timeout.
      const sweep = setInterval(() => s.closeIdleConnections(), 50);
      sweep.unref();
      s.close(() => {
        clearTimeout(timer);
        clearInterval(sweep);
        resolve();
      });
      s.closeIdleConnections();
    })));
    await h2Closed;
  }

  /** The HTTP/1.1 server: the plaintext listener's, which also takes the TLS listener's HTTP/1.1 connections. */
  #httpServer(): Server {
    this.#http ??= this.#newHttpServer();
    return this.#http;
  }

  #newHttpServer(): Server {
    const headersTimeout = this.#o.requestHeadersTimeoutMs;
    const requestTimeout = this.#o.requestTimeoutMs;
    // node:http checks both timeouts on an interval (30 s by default): a quarter of the shorter one keeps them close to their value.
    const shortest = Math.min(headersTimeout || Infinity, requestTimeout || Infinity);
    const connectionsCheckingInterval = Number.isFinite(shortest) ? Math.max(50, Math.min(30_000, Math.floor(shortest / 4))) : 30_000;
    const server = createServer({ keepAliveTimeout: 65_000, headersTimeout, requestTimeout, connectionsCheckingInterval, noDelay: true }, this.#o.handler);
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      // As node:http's default, but ending the socket gracefully: never write into a response already under way.
      const inFlight = (socket as { _httpMessage?: ServerResponse | null })._httpMessage;
      if (socket.writable && (!inFlight || !inFlight.headersSent)) {
        const status = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
        socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`, () => socket.destroy());
      } else socket.destroy();
    });
    return server;
  }

  /**
   * Listens on `host`; `::` is dual-stack (IPv6 and IPv4 on one socket, whatever the system's default), and
   * falls back to IPv4 alone on a host without IPv6.
   */
  async #dualStack(host: string, listen: (host: string, extra: { ipv6Only?: boolean }) => Promise<AddressInfo>): Promise<AddressInfo> {
    if (host !== '::') return listen(host, {});
    try {
      return await listen('::', { ipv6Only: false });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL') throw err;
      this.#o.logger.warn({ err: (err as Error).message }, 'no IPv6 on this host: listening on IPv4 only');
      return listen('0.0.0.0', {});
    }
  }
}

function listenOn(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
}
