// The HTTPS listener (HTTPS_PORT). Each connection's ClientHello is read first
// (client-hello.ts) and the connection handed to the TLS server of the profile
// its name is served with (profiles.ts: minimum version, ciphers, ALPN; one
// TLS server per profile in use, made on first use), whose SNICallback gives
// the name's certificate from the CertificateTable in force. A name the agent
// has no certificate for fails the handshake; a ClientHello without SNI gets
// the default certificate and settings. After the handshake the connection
// goes to the HTTP/1.1 server (the plaintext listener's, so limits and the
// request path are the same) or, when ALPN chose h2, to the HTTP/2 server.
import net, { type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import type { CertificateTable } from './certificates.ts';
import { readClientHello } from './client-hello.ts';
import type { TlsProfile } from './profiles.ts';

/** Where a connection goes once TLS is up. */
export interface ConnectionSink {
  emit(event: 'connection', socket: Socket): boolean;
}

export interface HttpsListenerOptions {
  table: CertificateTable;
  /** HTTP/1.1 connections (alpn http/1.1 or none). */
  http1: ConnectionSink;
  /** HTTP/2 connections (alpn h2); null: none offered. */
  http2: ConnectionSink | null;
  /** Time for the ClientHello and the handshake together. */
  handshakeTimeoutMs: number;
  logger: Logger;
  /** Called with each failed handshake's reason (metrics). */
  onHandshakeFailure?: (reason: string) => void;
  /** Session ticket keys shared by the workers (48 bytes); default: each TLS server's own. */
  ticketKeys?: Buffer;
}

/** Why a handshake failed, in a few words (metric label). */
function failureReason(err: NodeJS.ErrnoException): string {
  const code = err.code ?? '';
  if (code === 'ERR_SSL_UNSUPPORTED_PROTOCOL' || code.includes('PROTOCOL_VERSION')) return 'protocol_version';
  if (code.includes('NO_SHARED_CIPHER')) return 'no_shared_cipher';
  if (code.includes('APPLICATION_PROTOCOL')) return 'no_application_protocol';
  if (code === 'ERR_TLS_HANDSHAKE_TIMEOUT' || code === 'ECONNRESET') return 'aborted';
  if (/unknown server name/.test(err.message)) return 'unknown_name';
  return 'other';
}

export class HttpsListener {
  private readonly options: HttpsListenerOptions;
  private readonly servers = new Map<string, tls.Server>();
  private readonly profiles = new Map<string, TlsProfile>();
  private readonly net: NetServer;
  /** Connections not yet handed over (reading the ClientHello). */
  private readonly pending = new Set<Socket>();

  constructor(options: HttpsListenerOptions) {
    this.options = options;
    this.net = net.createServer({ noDelay: true }, (socket) => this.accept(socket));
  }

  get server(): NetServer {
    return this.net;
  }

  listen(port: number, host: string, extra: { reusePort?: boolean; exclusive?: boolean; ipv6Only?: boolean } = {}): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.net.once('error', reject);
      this.net.listen({ port, host, ...extra }, () => {
        this.net.off('error', reject);
        resolve(this.net.address() as AddressInfo);
      });
    });
  }

  /** Stops accepting; connections being set up are cut (handed-over ones close with their HTTP server). */
  close(): Promise<void> {
    for (const s of this.pending) s.destroy();
    return new Promise((resolve) => this.net.close(() => resolve()));
  }

  private accept(socket: Socket): void {
    this.pending.add(socket);
    let data: Buffer = Buffer.alloc(0);
    const done = () => {
      clearTimeout(timer);
      this.pending.delete(socket);
      socket.off('data', onData);
      socket.off('error', onError);
      socket.off('end', onEnd);
    };
    const timer = setTimeout(() => {
      done();
      this.options.onHandshakeFailure?.('timeout');
      socket.destroy();
    }, this.options.handshakeTimeoutMs);
    timer.unref();
    const onError = () => {
      done();
      socket.destroy();
    };
    const onEnd = onError;
    const onData = (chunk: Buffer) => {
      data = data.length === 0 ? chunk : Buffer.concat([data, chunk]);
      const read = readClientHello(data);
      if (read.state === 'more') return;
      done();
      if (read.state === 'not-tls') {
        this.options.onHandshakeFailure?.('not_tls');
        socket.destroy();
        return;
      }
      socket.pause();
      socket.unshift(data);
      const name = read.servername;
      const entry = name === null ? undefined : this.options.table.lookup(name);
      this.serverFor(entry?.profile ?? this.options.table.defaultProfile).emit('connection', socket);
    };
    socket.on('data', onData);
    socket.on('error', onError);
    socket.on('end', onEnd);
  }

  /**
   * New session ticket keys (48 bytes, the workers' shared ones rotated by the primary): tickets issued from now on
   * use them, and tickets issued under the previous keys no longer resume (Node's TLS servers hold one key), so
   * those viewers make one full handshake.
   */
  setTicketKeys(keys: Buffer): void {
    this.options.ticketKeys = keys;
    for (const server of this.servers.values()) server.setTicketKeys(keys);
  }

  /** The default certificate changed: the TLS servers' own context (used without SNI) is replaced for the next handshakes. */
  defaultCertificateChanged(): void {
    for (const [key, server] of this.servers) {
      const profile = this.profiles.get(key)!;
      server.setSecureContext(this.serverOptions(profile));
    }
  }

  private serverOptions(profile: TlsProfile): tls.TlsOptions {
    const { table } = this.options;
    const def = table.default;
    return {
      minVersion: profile.minVersion,
      maxVersion: 'TLSv1.3',
      ciphers: profile.ciphers,
      honorCipherOrder: true,
      dhparam: 'auto',
      ALPNProtocols: this.options.http2 === null ? profile.alpn.filter((p) => p !== 'h2') : [...profile.alpn],
      handshakeTimeout: this.options.handshakeTimeoutMs,
      ...(this.options.ticketKeys === undefined ? {} : { ticketKeys: this.options.ticketKeys }),
      // Without SNI: the default certificate (none: such handshakes fail).
      ...(def === null ? {} : { cert: def.pair.certPem, key: def.pair.keyPem }),
      // The certificate of the name asked for, from the table in force at this handshake.
      SNICallback: (servername, cb) => {
        const entry = table.lookup(canonicalServerName(servername) ?? '');
        if (entry === undefined) cb(new Error(`unknown server name ${servername}`), undefined);
        else cb(null, entry.context);
      },
    };
  }

  private serverFor(profile: TlsProfile): tls.Server {
    let server = this.servers.get(profile.key);
    if (server !== undefined) return server;
    const { logger } = this.options;
    server = tls.createServer(this.serverOptions(profile));
    server.on('secureConnection', (socket: TLSSocket) => {
      // Read once here for every later reader (the 421 check of each request, HTTP/1.1 and HTTP/2 alike): host names
      // are case-insensitive (RFC 6066 §3, RFC 4343), so SHOP.EXAMPLE.TEST is the name Host: shop.example.test asks for.
      socket.servername = canonicalServerName(socket.servername);
      const sink = socket.alpnProtocol === 'h2' && this.options.http2 !== null ? this.options.http2 : this.options.http1;
      sink.emit('connection', socket);
    });
    server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: TLSSocket) => {
      const reason = failureReason(err);
      this.options.onHandshakeFailure?.(reason);
      logger.debug({ err: err.message, reason, servername: (socket as { servername?: string | false }).servername || null, remote: socket.remoteAddress }, 'TLS handshake failed');
    });
    this.servers.set(profile.key, server);
    this.profiles.set(profile.key, profile);
    return server;
  }
}

/** A TLS server name as the agent compares it with Host: lower-case, without a trailing dot (absent: null). */
export function canonicalServerName(name: string | false | null | undefined): string | null {
  if (!name) return null;
  const lower = name.toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}
