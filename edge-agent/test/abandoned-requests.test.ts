// Abandoned requests do not keep the origin busy (CVE-2023-44487, "rapid
// reset", and its HTTP/1.1 cousin send-and-close). A cache fill nobody waits
// for any more (its viewer left, no collapsed follower, and no object being
// kept for the cache) is cancelled at the origin; a fill that is worth
// finishing keeps its HTTP/2 stream's slot after a reset, so resets never
// start more origin work than the stream limit; a session that resets more
// than a bound gets GOAWAY. Against a real slow origin that counts the
// requests it received and the ones cancelled under it.
import t from 'tap';
import http2 from 'node:http2';
import { connect } from 'node:net';
import type { ServerResponse } from 'node:http';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { eventually } from '../../test/support/eventually.ts';
import { DefaultCertificate } from '../src/tls/certificates.ts';
import { MAX_CONCURRENT_STREAMS, RESET_BURST } from '../src/tls/http2-server.ts';
import { HOST, startAgent, startOrigin } from './helpers.ts';

const ca = await makeCa('Abandoned Requests CA');
const leaf = await makeLeaf(ca, [HOST]);

/** Requests the origin holds until released: /hold/* never answers, /partial/* sends its head and half its body. */
const held: { url: string; res: ServerResponse }[] = [];
const cancelledOf = (prefix: string) => cancelledUrls.filter((u) => u.startsWith(prefix)).length;
const cancelledUrls: string[] = [];
const origin = await startOrigin((req, res) => {
  const url = req.url ?? '/';
  res.on('close', () => {
    if (!res.writableFinished) cancelledUrls.push(url);
  });
  if (url.startsWith('/partial/')) {
    // An early hint first: a viewer that saw it knows the edge has this head too (parsed in the same read).
    res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600', 'content-length': '20' });
    res.write('0123456789');
  }
  held.push({ url, res });
});
const release = (prefix: string) => {
  for (const h of held.filter((x) => x.url.startsWith(prefix))) {
    if (h.res.headersSent) h.res.end('abcdefghij');
    else h.res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600' }).end(`released ${h.url}`);
  }
};
t.teardown(() => { release('/'); return origin.close(); });

const edge = await startAgent({
  version: 1,
  endpoints: [{
    id: 'ep1', hostname: HOST, default_origin_id: 'o1', http_version: 'http2',
    origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0, timeout_ms: 60_000 }],
  }],
});
edge.agent.setDefaultCertificate(new DefaultCertificate({ certPem: leaf.certPem + ca.pem, keyPem: leaf.keyPem }));
const { port: httpsPort } = await edge.agent.listenHttps(0, '127.0.0.1');
t.teardown(() => edge.close());

const arrivedOf = (prefix: string) => origin.requests.filter((r) => r.url.startsWith(prefix)).length;

/** HTTP/1.1 send-and-close: the request written, then the connection closed without waiting for the answer. */
function sendAndClose(path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect(edge.port, '127.0.0.1', () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, () => { socket.destroy(); resolve(); });
    });
    socket.on('error', reject);
  });
}

function session(): http2.ClientHttp2Session {
  const s = http2.connect(`https://127.0.0.1:${httpsPort}`, { servername: HOST, ca: ca.pem });
  s.on('error', () => {});
  return s;
}

/** One HTTP/2 GET and its status (an error carries the stream's RST_STREAM code). */
function h2get(s: http2.ClientHttp2Session, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = s.request({ ':path': path, ':authority': HOST });
    let status = 0;
    let body = '';
    req.setEncoding('utf8');
    req.on('response', (h) => { status = Number(h[':status']); });
    req.on('data', (c: string) => { body += c; });
    req.on('end', () => resolve({ status, body }));
    req.on('error', reject);
    req.end();
  });
}

t.test('HTTP/1.1 send-and-close: every origin request a gone viewer started is cancelled', async (t) => {
  const n = 40;
  for (let i = 0; i < n; i++) await sendAndClose(`/hold/h1/${i}`);
  await eventually(() => arrivedOf('/hold/h1/') === cancelledOf('/hold/h1/'), 'every origin request of a gone viewer cancelled');
  t.ok(arrivedOf('/hold/h1/') <= n, `the origin saw at most one request per viewer (${arrivedOf('/hold/h1/')})`);
  t.equal(cancelledOf('/hold/h1/'), arrivedOf('/hold/h1/'), 'none left running at the origin');
  await edge.agent.proxy.settled();
  t.pass('no fill is left running at the edge');
  const next = edge.get('/hold/h1/0');
  await origin.received('/hold/h1/0', 2);
  release('/hold/h1/');
  const after = await next;
  t.equal(after.status, 200, 'the next viewer of the key leads a fill of its own');
  t.equal(after.body, 'released /hold/h1/0');
});

t.test('a fill someone still waits for goes on: the leader leaves, its collapsed follower keeps it and is answered', async (t) => {
  // The leader: a raw connection whose viewer leaves once the follower waits on the same fill.
  const leader = connect(edge.port, '127.0.0.1');
  await new Promise<void>((resolve) => leader.once('connect', () => resolve()));
  leader.write(`GET /hold/kept HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
  await origin.received('/hold/kept');
  const joined = edge.agent.proxy.collapsedFollowers;
  const follower = edge.get('/hold/kept');
  await eventually(() => edge.agent.proxy.collapsedFollowers === joined + 1, 'the follower waits for the leader\'s fill');
  leader.destroy();
  await sendAndClose('/hold/alone');
  await eventually(() => cancelledOf('/hold/alone') === 1, 'a lone leaver\'s fill (sent after the leader left) is cancelled');
  t.equal(cancelledOf('/hold/kept'), 0, 'the followed fill was not cancelled');
  release('/hold/kept');
  const answer = await follower;
  t.equal(answer.status, 200);
  t.equal(answer.body, 'released /hold/kept');
  t.equal(arrivedOf('/hold/kept'), 1, 'one origin request for both');
});

t.test('a cacheable object under way is finished for the cache when its viewer leaves', async (t) => {
  const viewer = connect(edge.port, '127.0.0.1');
  await new Promise<void>((resolve) => viewer.once('connect', () => resolve()));
  viewer.write(`GET /partial/object HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
  await new Promise<void>((resolve) => viewer.once('data', () => resolve()));
  viewer.destroy();
  t.equal(cancelledOf('/partial/object'), 0, 'the viewer saw the hint and left');
  release('/partial/object');
  await edge.agent.proxy.settled();
  const hit = await edge.get('/partial/object');
  t.equal(hit.headers['x-cache-status'], 'HIT', 'stored although nobody waited');
  t.equal(hit.body, '0123456789abcdefghij');
  t.equal(cancelledOf('/partial/object'), 0);
});

t.test('HTTP/2 rapid reset: two sessions of 1,000 HEADERS+RST_STREAM each get GOAWAY, and the origin sees no work left running', async (t) => {
  const sessions = [session(), session()];
  const goaways = sessions.map((s) => new Promise<number>((resolve) => s.once('goaway', (code: number) => resolve(code))));
  for (const [k, s] of sessions.entries()) {
    await new Promise<void>((resolve) => s.once('connect', () => resolve()));
    for (let i = 0; i < 1000; i++) {
      if (s.closed || s.destroyed) break;
      const req = s.request({ ':path': `/hold/h2/${k}/${i}`, ':authority': HOST });
      req.on('error', () => {});
      req.close(http2.constants.NGHTTP2_CANCEL);
    }
  }
  const codes = await Promise.all(goaways);
  t.equal(codes.length, 2, 'each session was sent GOAWAY');
  await eventually(() => arrivedOf('/hold/h2/') === cancelledOf('/hold/h2/'), 'every origin request of a reset stream cancelled');
  t.ok(arrivedOf('/hold/h2/') <= 2 * RESET_BURST, `the origin saw at most the reset bound per session (${arrivedOf('/hold/h2/')} of 2,000)`);
  for (const s of sessions) s.destroy();
});

t.test('HTTP/2: origin work a reset stream started keeps the stream\'s slot until it ends; beyond the limit a stream is refused', async (t) => {
  const s = session();
  t.teardown(() => s.destroy());
  await new Promise<void>((resolve) => s.once('connect', () => resolve()));
  // Range misses: each asks the origin for the slice holding it (the cache's own work, always finished: slices.ts).
  // Resetting them leaves the slice requests running, and their streams' slots stay taken.
  const ranged = RESET_BURST - 4;
  const open = MAX_CONCURRENT_STREAMS - ranged;
  const streams: http2.ClientHttp2Stream[] = [];
  for (let i = 0; i < ranged; i++) {
    const req = s.request({ ':path': `/hold/range/${i}`, ':authority': HOST, range: 'bytes=0-3' });
    req.on('error', () => {});
    streams.push(req);
  }
  for (let i = 0; i < open; i++) s.request({ ':path': `/hold/open/${i}`, ':authority': HOST }).on('error', () => {}).end();
  await eventually(() => arrivedOf('/hold/range/') === ranged && arrivedOf('/hold/open/') === open, 'every slice request and forward at the origin');
  for (const req of streams) req.close(http2.constants.NGHTTP2_CANCEL);
  // The open streams' requests are ended and answered by nobody yet; the reset ones are gone, but their slots stay taken.
  await new Promise<void>((resolve, reject) => s.ping((err) => (err ? reject(err) : resolve()))); // the resets reached the edge
  t.equal(cancelledOf('/hold/range/'), 0, 'the slice requests of the reset streams go on (kept for the cache)');
  const refused = await h2get(s, '/hold/extra').then(() => '', (err: Error) => err.message);
  t.match(refused, /NGHTTP2_REFUSED_STREAM/, 'a new stream is refused (safe to retry) while the reset streams\' fills run');
  t.equal(arrivedOf('/hold/extra'), 0, 'and starts no origin work');
  t.equal(s.closed, false, 'the session itself goes on');
  release('/hold/range/');
  release('/hold/open/');
  await edge.agent.proxy.settled();
  const after = await h2get(s, '/hold/range/0');
  t.same(after, { status: 200, body: 'released /hold/range/0' }, 'once the slice requests ended the session is served again, from cache');
});
