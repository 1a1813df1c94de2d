// The same cache scenarios over HTTP/1.1 and HTTP/2 (issue 23 item 3): an agent
// with its HTTPS listener, a real origin, and a viewer (undici, h2 by ALPN or
// not) that runs each scenario once per protocol: miss then hit, HEAD, a 304
// from cache, a range from cache, Vary variants, collapsed misses, no-store,
// revalidation, a purge, a POST whose body HTTP/2 frames without
// Content-Length, a large object, a compressed variant, 103 Early Hints. The
// whole request path (routing, policies, cache, collapsing, ranges, 1xx)
// answers alike.
import t from 'tap';
import http2 from 'node:http2';
import { Agent, request } from 'undici';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { DefaultCertificate } from '../src/tls/certificates.ts';
import { HOST, startAgent, startOrigin } from './helpers.ts';

const ca = await makeCa('HTTP/2 Test CA');
const leaf = await makeLeaf(ca, [HOST]);
const big = Buffer.alloc(200 * 1024, 'b');
let slowArrivals = 0;
const origin = await startOrigin((req, res) => {
  const url = req.url!;
  if (req.method === 'POST') {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
      res.end(`posted ${body}`);
    });
    return;
  }
  if (url.endsWith('/slow')) {
    slowArrivals++;
    setTimeout(() => { res.writeHead(200, { 'cache-control': 'max-age=60' }); res.end('slow'); }, 300);
    return;
  }
  if (url.endsWith('/vary')) {
    res.writeHead(200, { 'cache-control': 'max-age=60', vary: 'Accept-Language', 'content-language': String(req.headers['accept-language']) });
    res.end(`lang ${req.headers['accept-language']}`);
    return;
  }
  if (url.endsWith('/nostore')) {
    res.writeHead(200, { 'cache-control': 'no-store' });
    res.end('fresh');
    return;
  }
  if (url.endsWith('/reval')) {
    if (req.headers['if-none-match'] === '"v1"') {
      res.writeHead(304, { etag: '"v1"', 'cache-control': 'max-age=0' });
      res.end();
      return;
    }
    res.writeHead(200, { etag: '"v1"', 'cache-control': 'max-age=0' });
    res.end('revalidated body');
    return;
  }
  if (url.endsWith('/big')) {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'cache-control': 'max-age=60' });
    res.end(big);
    return;
  }
  if (url.endsWith('/hints')) {
    res.writeEarlyHints({ link: '</a.css>; rel=preload; as=style' });
    setTimeout(() => { res.writeHead(200, { 'cache-control': 'max-age=60' }); res.end('hinted'); }, 20);
    return;
  }
  if (url.endsWith('/text')) {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60', etag: '"t1"' });
    res.end('compressible text '.repeat(200));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60', etag: '"e1"' });
  res.end(`origin ${url} ${'0123456789'.repeat(10)}`);
});
t.teardown(() => origin.close());

const snapshot = {
  version: 1,
  endpoints: [{
    id: 'ep1', hostname: HOST, default_origin_id: 'o1', http_version: 'http2', compression: { enabled: true, min_size_bytes: 100 },
    origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0, timeout_ms: 5000 }],
  }],
};
const edge = await startAgent(snapshot);
edge.agent.setDefaultCertificate(new DefaultCertificate({ certPem: leaf.certPem + ca.pem, keyPem: leaf.keyPem }));
const { port: httpsPort } = await edge.agent.listenHttps(0, '127.0.0.1');
t.teardown(() => edge.close());

for (const protocol of ['HTTP/1.1', 'HTTP/2'] as const) {
  const dispatcher = new Agent({ allowH2: protocol === 'HTTP/2', connect: { servername: HOST, ca: ca.pem } });
  t.teardown(() => dispatcher.close());
  const p = protocol === 'HTTP/2' ? 'h2' : 'h1';
  const get = async (path: string, headers: Record<string, string> = {}, method = 'GET', body?: string) => {
    const res = await request(`https://127.0.0.1:${httpsPort}${path}`, { dispatcher, method: method as 'GET', headers: { host: HOST, ...headers }, body });
    const buf = Buffer.from(await res.body.arrayBuffer());
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: res.statusCode, headers: h, body: buf };
  };

  t.test(`${protocol}: the cache scenarios`, async (t) => {
    const miss = await get(`/${p}/a`);
    t.equal(miss.status, 200);
    t.equal(miss.headers['x-cache-status'], 'MISS', 'miss');
    // HTTP/1.1 answers say keep-alive; HTTP/2 has no connection-specific fields at all.
    t.equal(miss.headers.connection, protocol === 'HTTP/2' ? undefined : 'keep-alive', `spoken over ${protocol}`);
    const hit = await get(`/${p}/a`);
    t.equal(hit.headers['x-cache-status'], 'HIT', 'then hit');
    t.same(hit.body, miss.body, 'the same body');
    t.ok(hit.headers.age !== undefined, 'with Age');
    t.equal(origin.count(`/${p}/a`), 1, 'one origin request');

    const head = await get(`/${p}/a`, {}, 'HEAD');
    t.same([head.status, head.headers['x-cache-status'], head.body.length], [200, 'HIT', 0], 'HEAD from cache, no body');
    const notModified = await get(`/${p}/a`, { 'if-none-match': '"e1"' });
    t.same([notModified.status, notModified.body.length], [304, 0], '304 from cache for a matching If-None-Match');
    const range = await get(`/${p}/a`, { range: 'bytes=0-5' });
    t.same([range.status, range.headers['content-range'], range.body.toString()], [206, `bytes 0-5/${miss.body.length}`, 'origin'], 'a range from the cached object');

    const en = await get(`/${p}/vary`, { 'accept-language': 'en' });
    const fr = await get(`/${p}/vary`, { 'accept-language': 'fr' });
    const en2 = await get(`/${p}/vary`, { 'accept-language': 'en' });
    t.same([en.body.toString(), fr.body.toString(), en2.body.toString(), en2.headers['x-cache-status']], ['lang en', 'lang fr', 'lang en', 'HIT'], 'Vary variants');

    const before = slowArrivals;
    const collapsed = await Promise.all(Array.from({ length: 5 }, () => get(`/${p}/slow`)));
    t.same(collapsed.map((r) => r.body.toString()), Array(5).fill('slow'));
    t.equal(slowArrivals - before, 1, 'five concurrent misses, one origin request');

    await get(`/${p}/nostore`);
    await get(`/${p}/nostore`);
    t.equal(origin.count(`/${p}/nostore`), 2, 'no-store is not kept');

    await get(`/${p}/reval`);
    const reval = await get(`/${p}/reval`);
    t.same([reval.headers['x-cache-status'], reval.body.toString()], ['REVALIDATED', 'revalidated body'], 'a stale object revalidated with a 304');

    edge.agent.applyPurge({ sequence: 0, purge_id: `purge-${p}`, endpoint_id: 'ep1', type: 'path', paths: [`/${p}/a`] });
    t.equal((await get(`/${p}/a`)).headers['x-cache-status'], 'MISS', 'purged: a miss again');

    // HTTP/2 frames a body without Content-Length; it must still reach the origin.
    const posted = await get(`/${p}/form`, { 'content-type': 'text/plain' }, 'POST', 'field=value');
    t.same([posted.status, posted.body.toString()], [200, 'posted field=value'], 'a POST body reaches the origin');

    await get(`/${p}/big`);
    const bigHit = await get(`/${p}/big`);
    t.same([bigHit.headers['x-cache-status'], bigHit.body.length, bigHit.body.equals(big)], ['HIT', big.length, true], 'a 200 KiB hit, intact');

    await get(`/${p}/text`);
    const gz = await get(`/${p}/text`, { 'accept-encoding': 'gzip' });
    t.same([gz.headers['content-encoding'], gz.headers['x-cache-status']], ['gzip', 'HIT'], 'a compressed variant from cache');
  });
}

t.test('ALPN picks h2 for the http2 endpoint, and 103 Early Hints reach an HTTP/2 viewer before the final answer', async (t) => {
  const session = http2.connect(`https://127.0.0.1:${httpsPort}`, { servername: HOST, ca: ca.pem });
  t.teardown(() => session.close());
  const infos: number[] = [];
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = session.request({ ':path': '/hints', ':authority': HOST });
    req.on('headers', (h) => infos.push(Number(h[':status'])));
    let status = 0;
    let body = '';
    req.on('response', (h) => { status = Number(h[':status']); });
    req.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status, body })).on('error', reject);
    req.end();
  });
  t.equal(session.alpnProtocol, 'h2');
  t.same(infos, [103], 'one 103 before the final response');
  t.same(answer, { status: 200, body: 'hinted' });
  const authorityAndHost = await new Promise<number>((resolve, reject) => {
    const req = session.request({ ':path': '/x', ':authority': HOST, host: 'other.test' });
    req.on('response', (h) => { resolve(Number(h[':status'])); req.resume(); }).on('error', reject);
    req.end();
  });
  t.equal(authorityAndHost, 400, 'a Host field naming another authority than :authority is malformed');
});
