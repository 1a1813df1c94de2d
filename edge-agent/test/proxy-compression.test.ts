// Compression at the edge with a real origin: br and gzip by Accept-Encoding
// q-values, each variant made once and stored beside the identity object (the
// origin is asked once, a hit is never compressed again), validators that
// stay correct (suffixed ETags, 304 per representation), ranges from the
// identity representation, what is never compressed (small, incompressible,
// already encoded, no-transform), a streamed answer encoded on the fly, the
// route's compression_enabled overriding the endpoint's, and a purge dropping
// every variant.
import t from 'tap';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { request } from 'undici';
import { HOST, rawRequest, startAgent, startOrigin } from './helpers.ts';

const text = 'All work and no play makes a CDN a dull cache. '.repeat(200);
const origin = await startOrigin((req, res) => {
  const url = req.url ?? '/';
  if (url.startsWith('/small')) return res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600' }).end('tiny');
  if (url.startsWith('/image')) return res.writeHead(200, { 'content-type': 'image/png', 'cache-control': 'max-age=600' }).end(text);
  if (url.startsWith('/encoded')) return res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip', vary: 'Accept-Encoding', 'cache-control': 'max-age=600' }).end('not really gzip');
  if (url.startsWith('/no-transform')) return res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600, no-transform' }).end(text);
  // Answers that may carry a viewer's secret (a CSRF token, a session): BREACH reads them through compressed lengths.
  if (url.startsWith('/secret/private')) return res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'private, max-age=60' }).end(`token=s3cr3t ${text}`);
  if (url.startsWith('/secret/no-store')) return res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'no-store' }).end(`token=s3cr3t ${text}`);
  if (url.startsWith('/secret/cookie')) return res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'max-age=60', 'set-cookie': 'sid=s3cr3t; HttpOnly' }).end(`token=s3cr3t ${text}`);
  if (url.startsWith('/live')) {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'public, max-age=600', etag: '"live"' });
    res.write('{"items":[');
    res.end(`${JSON.stringify(text)}]}`);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'max-age=600', etag: '"page-1"' }).end(text);
});
t.teardown(() => origin.close());

const edge = await startAgent({
  version: 1,
  endpoints: [{
    id: 'ep1', hostname: HOST, default_origin_id: 'o1',
    compression: { enabled: true, algorithms: ['br', 'gzip'], min_size_bytes: 100 },
    origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
    routes: [{ id: 'plain', origin_id: 'o1', match: { paths: ['/plain/*'] }, compression_enabled: false }],
  }],
});
t.teardown(() => edge.close());

async function fetchRaw(path: string, headers: Record<string, string> = {}) {
  const res = await request(`http://127.0.0.1:${edge.port}${path}`, { headers: { host: HOST, ...headers } });
  const body = Buffer.from(await res.body.arrayBuffer());
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
  return { status: res.statusCode, headers: h, body };
}

t.test('br, gzip and identity are three stored representations of one fetch; hits are never compressed again', async (t) => {
  const objects = edge.agent.store.objectCount;
  const gz = await fetchRaw('/doc', { 'accept-encoding': 'gzip' });
  t.equal(gz.headers['content-encoding'], 'gzip');
  t.equal(gunzipSync(gz.body).toString(), text);
  t.equal(Number(gz.headers['content-length']), gz.body.length);
  t.ok(gz.body.length < text.length / 5, 'it is smaller');
  t.match(gz.headers.vary, /Accept-Encoding/i);
  t.equal(gz.headers.etag, '"page-1-gzip"', 'the ETag names the representation');
  t.equal(gz.headers['accept-ranges'], undefined, 'no ranges advertised on an encoded representation');
  const br = await fetchRaw('/doc', { 'accept-encoding': 'gzip, deflate, br' });
  t.equal(br.headers['content-encoding'], 'br', 'br preferred at equal q');
  t.equal(brotliDecompressSync(br.body).toString(), text);
  t.equal(br.headers.etag, '"page-1-br"');
  const plain = await fetchRaw('/doc');
  t.equal(plain.headers['content-encoding'], undefined);
  t.equal(plain.body.toString(), text);
  t.match(plain.headers.vary, /Accept-Encoding/i, 'the identity answer says it varies too');
  t.equal(plain.headers.etag, '"page-1"');
  t.equal(origin.count('/doc'), 1, 'one origin fetch');
  t.equal(edge.agent.store.objectCount, objects + 3, 'identity, gzip and br stored separately');
  const gzHit = await fetchRaw('/doc', { 'accept-encoding': 'gzip' });
  t.equal(gzHit.headers['x-cache-status'], 'HIT');
  t.same(gzHit.body, gz.body, 'the stored gzip bytes');
  const before = edge.agent.store.memoryBytes;
  await fetchRaw('/doc', { 'accept-encoding': 'br' });
  t.equal(edge.agent.store.memoryBytes, before, 'a br hit stores nothing new');
});

t.test('q-values decide; q=0 refuses a coding; * covers the others', async (t) => {
  const enc = async (ae: string) => (await fetchRaw('/q', { 'accept-encoding': ae })).headers['content-encoding'];
  t.equal(await enc('br;q=0.5, gzip;q=0.8'), 'gzip');
  t.equal(await enc('br;q=0, gzip;q=0'), undefined);
  t.equal(await enc('br;q=0, *'), 'gzip');
  t.equal(await enc('*;q=0.1'), 'br');
  t.equal(await enc('deflate, identity'), undefined);
  t.equal(await enc('gzip;q=2'), undefined, 'a malformed q-value refuses');
  t.equal(origin.count('/q'), 1);
});

t.test('validators per representation: a 304 for the variant\'s ETag, none across representations', async (t) => {
  await fetchRaw('/v', { 'accept-encoding': 'gzip' });
  const same = await fetchRaw('/v', { 'accept-encoding': 'gzip', 'if-none-match': '"page-1-gzip"' });
  t.equal(same.status, 304);
  t.equal(same.headers.etag, '"page-1-gzip"');
  t.match(same.headers.vary, /Accept-Encoding/i);
  const cross = await fetchRaw('/v', { 'accept-encoding': 'gzip', 'if-none-match': '"page-1"' });
  t.equal(cross.status, 200, 'the identity ETag does not validate the gzip representation');
  const identity = await fetchRaw('/v', { 'if-none-match': '"page-1"' });
  t.equal(identity.status, 304);
});

t.test('a range request on a compressible object is answered from the identity representation', async (t) => {
  await fetchRaw('/r', { 'accept-encoding': 'gzip' });
  const r = await fetchRaw('/r', { 'accept-encoding': 'gzip, br', range: 'bytes=4-12' });
  t.equal(r.status, 206);
  t.equal(r.headers['content-encoding'], undefined);
  t.equal(r.headers['content-range'], `bytes 4-12/${text.length}`);
  t.equal(r.body.toString(), text.slice(4, 13));
  const resumed = await fetchRaw('/r', { 'accept-encoding': 'gzip', range: 'bytes=4-', 'if-range': '"page-1-gzip"' });
  t.equal(resumed.status, 200, 'If-Range with the gzip ETag does not match the identity bytes: the whole body');
  t.equal(resumed.headers['content-encoding'], undefined);
  t.equal(resumed.body.toString(), text);
});

t.test('never compressed: small, incompressible types, already encoded by the origin, no-transform, or the route says no', async (t) => {
  const small = await fetchRaw('/small', { 'accept-encoding': 'gzip' });
  t.equal(small.headers['content-encoding'], undefined);
  t.notMatch(small.headers.vary ?? '', /Accept-Encoding/i);
  t.equal((await fetchRaw('/image', { 'accept-encoding': 'gzip' })).headers['content-encoding'], undefined);
  const encoded = await fetchRaw('/encoded', { 'accept-encoding': 'br' });
  t.equal(encoded.headers['content-encoding'], 'gzip', 'the origin\'s encoding passes as it is');
  t.equal(encoded.body.toString(), 'not really gzip');
  t.equal((await fetchRaw('/no-transform', { 'accept-encoding': 'gzip' })).headers['content-encoding'], undefined);
  const routeOff = await fetchRaw('/plain/doc', { 'accept-encoding': 'gzip' });
  t.equal(routeOff.headers['content-encoding'], undefined, 'compression_enabled false on the route overrides the endpoint');
  t.notMatch(routeOff.headers.vary ?? '', /Accept-Encoding/i);
});

t.test('an answer streamed from the origin (not stored) is encoded on the fly', async (t) => {
  // The viewer's no-store keeps the answer out of the cache (RFC 9111 §5.2.1.5): it is streamed through.
  const live = await fetchRaw('/live', { 'accept-encoding': 'gzip', 'cache-control': 'no-store' });
  t.equal(live.headers['x-cache-status'], 'MISS');
  t.equal(live.headers['content-encoding'], 'gzip');
  t.equal(live.headers.etag, '"live-gzip"');
  t.equal(live.headers['content-length'], undefined, 'streamed');
  t.same(JSON.parse(gunzipSync(live.body).toString()), { items: [text] });
  const br = await fetchRaw('/live', { 'accept-encoding': 'br', 'cache-control': 'no-store' });
  t.equal(brotliDecompressSync(br.body).toString(), `{"items":[${JSON.stringify(text)}]}`);
});

t.test('no compression of secrets (BREACH): private, no-store and cookie-setting answers go out as the origin sent them', async (t) => {
  for (const path of ['/secret/private', '/secret/no-store', '/secret/cookie']) {
    for (const coding of ['gzip', 'br']) {
      const answer = await fetchRaw(path, { 'accept-encoding': coding });
      t.equal(answer.status, 200);
      t.equal(answer.headers['content-encoding'], undefined, `${path} (${coding} accepted): not compressed`);
      t.equal(answer.body.toString(), `token=s3cr3t ${text}`, `${path}: the identity bytes`);
    }
  }
  t.equal(origin.count('/secret/cookie'), 2, 'neither stored: each asked the origin');
  const page = await fetchRaw('/doc-public', { 'accept-encoding': 'gzip' });
  t.equal(page.headers['content-encoding'], 'gzip', 'a public answer is still compressed');
});

t.test('a path purge drops the object and every variant', async (t) => {
  await fetchRaw('/purged', { 'accept-encoding': 'gzip' });
  await fetchRaw('/purged', { 'accept-encoding': 'br' });
  t.equal(edge.agent.store.keysForPath('ep1', '/purged'), 3);
  edge.agent.applyPurge({ sequence: 0, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/purged'] });
  t.equal(edge.agent.store.keysForPath('ep1', '/purged'), 0);
  const after = await fetchRaw('/purged', { 'accept-encoding': 'gzip' });
  t.equal(after.headers['x-cache-status'], 'MISS');
  t.equal(origin.count('/purged'), 2);
});

t.test('only Accept-Encoding chooses the coding: not Accept-Language, not one the viewer lists in Connection', async (t) => {
  t.equal((await fetchRaw('/ae', { 'accept-language': 'gzip' })).headers['content-encoding'], undefined);
  const listed = await rawRequest(edge.port, ['GET /ae HTTP/1.1', `Host: ${HOST}`, 'Accept-Encoding: gzip', 'Connection: close, accept-encoding']);
  t.equal(listed.headers['content-encoding'], undefined, 'a hop-by-hop Accept-Encoding is not the viewer\'s');
  t.equal(listed.body, text);
});
