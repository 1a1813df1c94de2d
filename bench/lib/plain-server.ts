// A plain node:http server answering the same bytes from memory. As the bench's
// origin it sends what an origin would; with "baseline" it is the fair yardstick
// for the agent's cache hits: the same header fields, values of the same length
// and the same keep-alive timeout, its header list rebuilt once per second like
// the agent's (Date, Age and the Cache-Status ttl change).
import { createServer } from 'node:http';

const port = Number(process.argv[2]);
const baseline = process.argv[3] === 'baseline';
const bodies = new Map<string, Buffer>([['/1k', Buffer.alloc(1024, 'a')], ['/100k', Buffer.alloc(100 * 1024, 'b')]]);
const started = Date.now();
const cached = new Map<string, { sec: number; headers: string[] }>();

function baselineHeaders(url: string, body: Buffer): string[] {
  const now = Date.now();
  const sec = Math.floor(now / 1000);
  let c = cached.get(url);
  if (c === undefined || c.sec !== sec) {
    const age = Math.floor((now - started) / 1000) + 10;
    const headers = [
      'content-type', 'application/octet-stream', 'content-length', String(body.length), 'cache-control', 'max-age=3600',
      'date', new Date(now).toUTCString(), 'accept-ranges', 'bytes', 'age', String(age),
      'cache-status', `edge-local; hit; ttl=${3600 - age}`, 'x-cache-status', 'HIT',
    ];
    cached.set(url, (c = { sec, headers }));
  }
  return c.headers;
}

const server = createServer((req, res) => {
  const url = req.url ?? '';
  const body = bodies.get(url);
  if (!body) {
    res.writeHead(404);
    res.end();
    return;
  }
  if (baseline) res.writeHead(200, baselineHeaders(url, body));
  else res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length, 'cache-control': 'max-age=3600' });
  res.end(body);
});
if (baseline) server.keepAliveTimeout = 65_000; // the agent's: same Keep-Alive header
server.listen(port, '127.0.0.1');
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(0));
