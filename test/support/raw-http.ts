// Sends bytes exactly as written over a TCP socket and reads the answer: for
// requests fetch() would rewrite (dot segments, duplicate headers, control
// characters) and for slow senders.
import net from 'node:net';

export interface RawResponse {
  status: number;
  headers: Map<string, string>;
  body: string;
  /** Whole answer as received (empty when the server closed without answering). */
  raw: string;
}

/** Writes `request` (a full HTTP/1.1 message) and resolves when the server closes or the timeout passes. */
export function rawRequest(url: string, request: string, timeoutMs = 5_000): Promise<RawResponse> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), timeoutMs);
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(chunks).toString('latin1')));
    });
  });
}

export function parseResponse(raw: string): RawResponse {
  const end = raw.indexOf('\r\n\r\n');
  const head = end === -1 ? raw : raw.slice(0, end);
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return { status: Number(statusLine.split(' ')[1] ?? 0), headers, body: end === -1 ? '' : raw.slice(end + 4), raw };
}

/** Opens a connection and sends `prefix` one byte at a time, every `intervalMs`; resolves with how long the server kept it open. */
export function trickle(url: string, prefix: string, intervalMs: number, maxMs: number): Promise<{ closedAfterMs: number; answer: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = net.connect(Number(port), hostname);
    let sent = 0;
    let answer = '';
    let timer: NodeJS.Timeout | undefined;
    const give = () => {
      if (socket.destroyed) return;
      if (sent < prefix.length) socket.write(prefix[sent++]!);
      timer = setTimeout(give, intervalMs);
    };
    const stop = setTimeout(() => socket.destroy(), maxMs);
    socket.on('connect', give);
    socket.on('data', (chunk) => (answer += chunk.toString('latin1')));
    socket.on('error', (error) => {
      if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET') reject(error);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      clearTimeout(stop);
      resolve({ closedAfterMs: performance.now() - started, answer });
    });
  });
}
