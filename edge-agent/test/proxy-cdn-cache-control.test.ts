// Issue 25, item 2: CDN-Cache-Control is a Structured Field Dictionary (RFC 9213
// §2, RFC 8941). A valid one replaces Cache-Control for the edge; one that does
// not parse, or gives a known directive a value of the wrong type, is ignored
// whole and Cache-Control applies. It is passed on to the viewer (a CDN in
// front of this one obeys it too).
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('RFC 9213 §2.1: an invalid CDN-Cache-Control is ignored whole and Cache-Control (no-store) applies', async (t) => {
  const cdnByPath = new Map<string, string>([
    ['/string-max-age', 'max-age="600"'],
    ['/decimal-max-age', 'max-age=600.0'],
    ['/negative-max-age', 'max-age=-600'],
    ['/unknown-parameter-type', 'max-age=600;since=@1700000000'],
    ['/trailing-comma', 'max-age=600,'],
    ['/upper-case-key', 'MAX-AGE=600'],
    ['/boolean-with-integer', 'max-age=600, public=1'],
    ['/valid', 'max-age=600'],
  ]);
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'no-store', 'cdn-cache-control': cdnByPath.get(req.url!)! });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const [path, value] of cdnByPath) {
    await edge.get(path);
    const again = await edge.get(path);
    if (path === '/valid') {
      t.equal(again.headers['x-cache-status'], 'HIT', 'a valid CDN-Cache-Control max-age wins over Cache-Control: no-store');
      t.equal(origin.count(path), 1);
    } else {
      t.equal(again.headers['x-cache-status'], 'MISS', `${value}: ignored, so no-store applies`);
      t.equal(origin.count(path), 2, `${value}: asked twice`);
    }
  }
});

t.test('RFC 9213 §2.1: a valid CDN-Cache-Control no-store wins over Cache-Control max-age, and Boolean false is absent', async (t) => {
  const cdnByPath = new Map<string, string>([['/no-store', 'no-store'], ['/no-store-false', 'no-store=?0, max-age=600']]);
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600', 'cdn-cache-control': cdnByPath.get(req.url!)! });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/no-store');
  t.equal((await edge.get('/no-store')).headers['x-cache-status'], 'MISS');
  await edge.get('/no-store-false');
  t.equal((await edge.get('/no-store-false')).headers['x-cache-status'], 'HIT', 'no-store=?0 does not forbid storing');
});

t.test('RFC 9213 §2: CDN-Cache-Control is passed on to the viewer, on a miss and on a hit, beside Cache-Control', async (t) => {
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=10', 'cdn-cache-control': 'max-age=600', 'surrogate-control': 'max-age=900' });
    res.end('x');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const miss = await edge.get('/x');
  t.equal(miss.headers['cdn-cache-control'], 'max-age=600');
  t.equal(miss.headers['cache-control'], 'max-age=10');
  t.equal(miss.headers['surrogate-control'], undefined, 'Surrogate-Control is for this cache alone');
  const hit = await edge.get('/x');
  t.equal(hit.headers['x-cache-status'], 'HIT');
  t.equal(hit.headers['cdn-cache-control'], 'max-age=600');
  t.match(hit.headers['cache-status'], /ttl=(59\d|600)/, 'the edge keeps it for CDN-Cache-Control\'s 600 s, not Cache-Control\'s 10');
});
