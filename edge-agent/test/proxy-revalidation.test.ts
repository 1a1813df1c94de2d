import t from 'tap';
import { startAgent, startOrigin, snapshotFor, testClock } from './helpers.ts';

t.test('stale object is revalidated with If-None-Match; 304 updates stored headers', async (t) => {
  let version = 1;
  const origin = await startOrigin((req, res) => {
    if (req.headers['if-none-match'] === '"v1"') {
      res.writeHead(304, { etag: '"v1"', 'cache-control': 'max-age=60', 'x-extra': `updated-${version}` });
      res.end();
      return;
    }
    res.writeHead(200, { etag: '"v1"', 'cache-control': 'max-age=0', 'x-extra': 'original' });
    res.end('body-v1');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const a = await edge.get('/r');
  t.equal(a.headers['x-cache-status'], 'MISS');
  version = 2;
  const b = await edge.get('/r');
  t.equal(b.status, 200);
  t.equal(b.body, 'body-v1');
  t.equal(b.headers['x-cache-status'], 'REVALIDATED');
  t.equal(b.headers['x-extra'], 'updated-2', 'stored header replaced by the 304');
  t.equal(origin.requests[1].headers['if-none-match'], '"v1"');
  const c = await edge.get('/r');
  t.equal(c.headers['x-cache-status'], 'HIT', 'fresh again after the 304 (max-age=60 from it)');
  t.equal(c.headers['x-extra'], 'updated-2');
  t.equal(origin.count('/r'), 2);
});

t.test('Last-Modified revalidation and client conditional requests get 304 from cache', async (t) => {
  const lm = new Date(Date.now() - 3600_000).toUTCString();
  const origin = await startOrigin((req, res) => {
    if (req.headers['if-modified-since'] === lm) {
      res.writeHead(304, { 'cache-control': 'max-age=60' });
      res.end();
      return;
    }
    res.writeHead(200, { 'last-modified': lm, etag: '"e"', 'cache-control': 'max-age=60' });
    res.end('doc');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/d');
  const inm = await edge.get('/d', { 'if-none-match': 'W/"e"' });
  t.equal(inm.status, 304, 'If-None-Match answered with 304 from cache (weak comparison)');
  t.equal(inm.headers['x-cache-status'], 'HIT');
  const ims = await edge.get('/d', { 'if-modified-since': new Date().toUTCString() });
  t.equal(ims.status, 304);
  t.equal(origin.count('/d'), 1);
});

t.test('must-revalidate is served while fresh and revalidated once stale', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.headers['if-none-match']) {
      res.writeHead(304, { etag: '"m"', 'cache-control': 'max-age=3, must-revalidate' });
      res.end();
      return;
    }
    res.writeHead(200, { etag: '"m"', 'cache-control': 'max-age=3, must-revalidate' });
    res.end('m');
  });
  const clock = testClock();
  const edge = await startAgent(snapshotFor(origin.port), { clock: clock.now });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/m');
  // max-age=3, not 1: the origin's Date has one-second resolution, so a copy can
  // be up to a second old when stored, and a 1 s lifetime made this test flaky.
  t.equal((await edge.get('/m')).headers['x-cache-status'], 'HIT', 'fresh must-revalidate is a hit');
  clock.advance(3100); // past max-age=3
  t.equal((await edge.get('/m')).headers['x-cache-status'], 'REVALIDATED');
});
