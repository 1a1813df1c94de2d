// Issue 25, item 3: when the origin refuses, closes or resets the connection,
// a stored response that may be served stale answers (RFC 9111 §4.2.4: a cache
// disconnected from the origin may serve stale) instead of a 502, unless the
// response forbade it (must-revalidate, proxy-revalidate, s-maxage, no-cache).
// A body the origin cuts short is an origin failure too, never a 500.
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

type Failure = 'none' | 'destroy' | 'reset' | 'mid-body';

async function setUp(t: Test) {
  let failure: Failure = 'none';
  const cacheControlByPath = new Map<string, string>();
  const origin = await startOrigin((req, res) => {
    if (failure === 'destroy') return req.socket.destroy();
    if (failure === 'reset') return req.socket.resetAndDestroy();
    const cc = cacheControlByPath.get(req.url!) ?? 'max-age=0';
    if (failure === 'mid-body') {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100', etag: '"v2"', 'cache-control': cc });
      res.write('only part of it');
      setTimeout(() => req.socket.destroy(), 20);
      return;
    }
    // max-age=0 with a validator: stored, and stale at once.
    res.writeHead(200, { 'content-type': 'text/plain', etag: '"v1"', 'cache-control': cc });
    res.end(`stored ${req.url}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  return { origin, edge, fail: (f: Failure) => { failure = f; }, cacheControl: (path: string, cc: string) => cacheControlByPath.set(path, cc) };
}

t.test('RFC 9111 §4.2.4: a stale object answers (STALE) when the origin closes, resets or cuts off the connection', async (t) => {
  const { edge, fail } = await setUp(t);
  for (const failure of ['destroy', 'reset', 'mid-body'] as const) {
    const path = `/${failure}`;
    fail('none');
    t.equal((await edge.get(path)).body, `stored ${path}`);
    fail(failure);
    const r = await edge.get(path);
    t.equal(r.status, 200, `${failure}: the stale copy, not 502`);
    t.equal(r.body, `stored ${path}`);
    t.equal(r.headers['x-cache-status'], 'STALE');
    t.match(r.headers['cache-status'], /hit; detail=stale-if-error/, 'the stale Cache-Status');
  }
});

t.test('RFC 9111 §4.2.4: a refused connection (the origin gone) serves the stale copy too', async (t) => {
  const { origin, edge } = await setUp(t);
  await edge.get('/gone');
  await origin.close();
  const r = await edge.get('/gone');
  t.equal(r.status, 200);
  t.equal(r.headers['x-cache-status'], 'STALE');
});

t.test('RFC 9111 §4.2.4: must-revalidate, proxy-revalidate, s-maxage and no-cache forbid it: 502', async (t) => {
  const { edge, fail, cacheControl } = await setUp(t);
  for (const cc of ['max-age=0, must-revalidate', 'max-age=0, proxy-revalidate', 's-maxage=0', 'no-cache']) {
    const path = `/${cc.replace(/\W+/g, '-')}`;
    cacheControl(path, cc);
    fail('none');
    await edge.get(path);
    fail('reset');
    const r = await edge.get(path);
    t.equal(r.status, 502, `${cc}: the origin's failure`);
    t.equal(r.headers['x-cache-status'], 'EXPIRED');
  }
});

t.test('RFC 9111 §4.2.4: a 5xx answer still needs stale-if-error (the origin answered: it is not a dropped connection)', async (t) => {
  let down = false;
  const origin = await startOrigin((_req, res) => {
    if (down) {
      res.writeHead(503, { 'content-type': 'text/plain' });
      return res.end('down');
    }
    res.writeHead(200, { 'content-type': 'text/plain', etag: '"v1"', 'cache-control': 'max-age=0' });
    res.end('stored');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/x');
  down = true;
  const r = await edge.get('/x');
  t.equal(r.status, 503);
  t.equal(r.body, 'down');
});

t.test('regression: a body the origin cuts short on a miss is a 502, not a 500, and nothing is stored', async (t) => {
  const { origin, edge, fail } = await setUp(t);
  fail('mid-body');
  const r = await edge.get('/cut');
  t.equal(r.status, 502);
  t.equal(r.headers['x-cache-status'], 'MISS');
  fail('none');
  const next = await edge.get('/cut');
  t.equal(next.body, 'stored /cut', 'the cut body was not kept');
  t.equal(origin.count('/cut'), 2);
});
