// A plain node:http server answering the same bytes from memory. As the bench's
// origin it sends what an origin would; with "baseline" it is the fair yardstick
// for the agent's cache hits: the same header fields, values of the same length
// and the same keep-alive timeout, its header list rebuilt once per second like
// the agent's (Date, Age and the Cache-Status ttl change). The text objects
// (/1k.txt, /100k.txt) are compressible; the baseline answers a request that
// accepts gzip or br with bytes encoded once at start, as the agent's stored
// variants are. With "baseline-https" or "baseline-h2" (and a certificate and
// key file) it is the same yardstick over TLS: node:https, or node:http2 on its
// core stream API (stream.respond / stream.end, no compatibility layer), so
// every ratio separates what Node costs from what the agent adds.
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { createSecureServer } from 'node:http2';
import { createServer as createHttpsServer } from 'node:https';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

/** Deterministic text that compresses like a real page or manifest (about 3-4×), not like a run of one letter. */
function benchText(size: number): Buffer {
  const words = ['segment', 'video', 'bitrate', 'duration', 'playlist', 'audio', 'codec', 'avc1.64001f', 'mp4a.40.2', 'resolution', '1920x1080', 'bandwidth', 'program', 'init', 'media'];
  let seed = 42;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  let out = '';
  while (out.length < size) out += `${words[Math.floor(rand() * words.length)]}=${Math.floor(rand() * 100000)}${rand() < 0.1 ? '\n' : ' '}`;
  return Buffer.from(out.slice(0, size));
}

const port = Number(process.argv[2]);
const mode = process.argv[3] ?? 'origin';
const baseline = mode.startsWith('baseline');
const bodies = new Map<string, Buffer>([['/1k', Buffer.alloc(1024, 'a')], ['/100k', Buffer.alloc(100 * 1024, 'b')], ['/1k.txt', benchText(1024)], ['/100k.txt', benchText(100 * 1024)]]);
const encoded = new Map<string, Buffer>();
for (const [path, body] of bodies) {
  if (!path.endsWith('.txt')) continue;
  encoded.set(`${path} gzip`, gzipSync(body, { level: 6 }));
  encoded.set(`${path} br`, brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 5, [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT } }));
}
const started = Date.now();
const cached = new Map<string, { sec: number; headers: string[] }>();

function baselineHeaders(url: string, body: Buffer, coding: string | null): string[] {
  const now = Date.now();
  const sec = Math.floor(now / 1000);
  const cacheKey = coding ? `${url} ${coding}` : url;
  let c = cached.get(cacheKey);
  if (c === undefined || c.sec !== sec) {
    const age = Math.floor((now - started) / 1000) + 10;
    const type = url.endsWith('.txt') ? 'text/plain' : 'application/octet-stream';
    const headers = [
      'content-type', type, 'content-length', String(body.length), 'cache-control', 'max-age=3600',
      'date', new Date(now).toUTCString(),
      ...(coding ? ['content-encoding', coding, 'vary', 'Accept-Encoding'] : ['accept-ranges', 'bytes']), 'age', String(age),
      'cache-status', `edge-local; hit; ttl=${3600 - age}`, 'x-cache-status', 'HIT',
    ];
    cached.set(cacheKey, (c = { sec, headers }));
  }
  return c.headers;
}

/** The answer to a GET of url, as the baseline or as an origin: status, flat header list, body. */
function answer(url: string, headers: IncomingHttpHeaders): { status: number; head: string[]; body: Buffer } {
  let body = bodies.get(url);
  if (!body) return { status: 404, head: [], body: Buffer.alloc(0) };
  if (!baseline) {
    return { status: 200, head: ['content-type', url.endsWith('.txt') ? 'text/plain' : 'application/octet-stream', 'content-length', String(body.length), 'cache-control', 'max-age=3600'], body };
  }
  const ae = headers['accept-encoding'];
  const coding = ae === undefined || !url.endsWith('.txt') ? null : ae.includes('br') ? 'br' : ae.includes('gzip') ? 'gzip' : null;
  if (coding) body = encoded.get(`${url} ${coding}`)!;
  return { status: 200, head: baselineHeaders(url, body, coding), body };
}

if (mode === 'baseline-h2') {
  const server = createSecureServer({ cert: readFileSync(process.argv[4]!), key: readFileSync(process.argv[5]!) });
  server.on('stream', (stream, headers) => {
    const a = answer(String(headers[':path'] ?? ''), headers as IncomingHttpHeaders);
    const head: Record<string, string | number> = { ':status': a.status };
    for (let i = 0; i < a.head.length; i += 2) head[a.head[i]!] = a.head[i + 1]!;
    stream.respond(head);
    stream.end(a.body);
  });
  server.listen(port, '127.0.0.1');
} else {
  const handler = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
    const a = answer(req.url ?? '', req.headers);
    res.writeHead(a.status, a.head);
    res.end(a.body);
  };
  const server = mode === 'baseline-https'
    ? createHttpsServer({ cert: readFileSync(process.argv[4]!), key: readFileSync(process.argv[5]!), ALPNProtocols: ['http/1.1'] }, handler)
    : createServer(handler);
  if (baseline) server.keepAliveTimeout = 65_000; // the agent's: same Keep-Alive header
  server.listen(port, '127.0.0.1');
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
