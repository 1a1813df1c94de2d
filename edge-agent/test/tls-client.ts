// A TLS viewer for tests of the HTTPS listener: opens a connection with the
// SNI name, versions, ciphers and ALPN protocols given, reports what the
// handshake gave (the certificate's names, the protocol, the cipher, ALPN) or
// why it failed, and sends HTTP/1.1 requests on the same connection.
import { connect, type TLSSocket } from 'node:tls';

export interface TlsOptions {
  port: number;
  /** SNI (omitted when null). */
  servername: string | null;
  minVersion?: 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';
  maxVersion?: 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';
  ciphers?: string;
  alpn?: string[];
  /** Trusted CA certificates (PEM); without them the certificate is not verified. */
  ca?: string;
}

export interface TlsConnection {
  socket: TLSSocket;
  /** The DNS names of the certificate the agent served. */
  names: string[];
  /** Its SHA-256 fingerprint. */
  fingerprint: string;
  protocol: string | null;
  cipher: string;
  alpn: string | false | null;
  /** One HTTP/1.1 request on this connection (keep-alive); the answer's status, fields and body. */
  get(host: string, path: string, headers?: Record<string, string>): Promise<{ status: number; headers: Record<string, string>; body: string }>;
  close(): void;
}

export function tlsConnect(options: TlsOptions): Promise<TlsConnection> {
  return new Promise((resolve, reject) => {
    const socket = connect({
      host: '127.0.0.1', port: options.port, ...(options.servername === null ? {} : { servername: options.servername }),
      minVersion: options.minVersion ?? 'TLSv1', maxVersion: options.maxVersion ?? 'TLSv1.3',
      ciphers: options.ciphers ?? 'DEFAULT:@SECLEVEL=0', ALPNProtocols: options.alpn ?? ['http/1.1'],
      ...(options.ca ? { ca: options.ca, checkServerIdentity: () => undefined } : { rejectUnauthorized: false }),
      timeout: 10_000,
    }, () => {
      socket.off('error', reject);
      const cert = socket.getPeerCertificate();
      const names = (cert.subjectaltname ?? '').split(', ').filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4));
      let buffered = '';
      const waiters: (() => void)[] = [];
      socket.setEncoding('latin1');
      socket.on('data', (chunk: string) => {
        buffered += chunk;
        for (const w of waiters.splice(0)) w();
      });
      socket.on('error', () => {});
      const get: TlsConnection['get'] = (host, path, headers = {}) => new Promise((resolveGet, rejectGet) => {
        buffered = '';
        const lines = [`GET ${path} HTTP/1.1`, `Host: ${host}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
        socket.write(lines.join('\r\n') + '\r\n\r\n');
        const timer = setTimeout(() => rejectGet(new Error(`no answer for ${host}${path}`)), 10_000);
        const check = () => {
          const end = buffered.indexOf('\r\n\r\n');
          if (end !== -1) {
            const [statusLine, ...fieldLines] = buffered.slice(0, end).split('\r\n');
            const fields: Record<string, string> = {};
            for (const l of fieldLines) {
              const c = l.indexOf(':');
              fields[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
            }
            const length = Number(fields['content-length'] ?? 0);
            if (buffered.length >= end + 4 + length) {
              clearTimeout(timer);
              return resolveGet({ status: Number(statusLine!.split(' ')[1]), headers: fields, body: buffered.slice(end + 4, end + 4 + length) });
            }
          }
          if (socket.destroyed) {
            clearTimeout(timer);
            return rejectGet(new Error('connection closed'));
          }
          waiters.push(check);
        };
        socket.once('close', () => { for (const w of waiters.splice(0)) w(); });
        check();
      });
      resolve({
        socket, names, fingerprint: cert.fingerprint256, protocol: socket.getProtocol(), cipher: socket.getCipher().name, alpn: socket.alpnProtocol,
        get, close: () => socket.destroy(),
      });
    });
    socket.once('error', reject);
    socket.once('timeout', () => socket.destroy(new Error('TLS connection timed out')));
  });
}

/** The error code a failed handshake ends with ('' when it succeeded). */
export async function handshakeError(options: TlsOptions): Promise<string> {
  try {
    (await tlsConnect(options)).close();
    return '';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
  }
}
