import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('Age from upstream counts against freshness', async (t) => {
  const origin = await startOrigin((req, res) => {
    // max-age=100 but the upstream says it is already 100 s old: stale on arrival.
    if (req.url === '/old') res.writeHead(200, { 'cache-control': 'max-age=100', age: '100' });
    else res.writeHead(200, { 'cache-control': 'max-age=100', age: '30' });
    res.end('x');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/old');
  t.not((await edge.get('/old')).headers['x-cache-status'], 'HIT', 'already stale: refetched');
  t.equal(origin.count('/old'), 2);
  await edge.get('/young');
  const y = await edge.get('/young');
  t.equal(y.headers['x-cache-status'], 'HIT');
  t.ok(Number(y.headers.age) >= 30, `Age includes upstream age (${y.headers.age})`);
});

t.test('Expires: invalid date means already expired; valid future date is fresh', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/bad') res.writeHead(200, { expires: '0' });
    else res.writeHead(200, { expires: new Date(Date.now() + 60_000).toUTCString(), date: new Date().toUTCString() });
    res.end('e');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/bad');
  t.equal((await edge.get('/bad')).headers['x-cache-status'], 'MISS');
  await edge.get('/good');
  t.equal((await edge.get('/good')).headers['x-cache-status'], 'HIT');
});

t.test('directive names are case-insensitive and status codes outside the heuristic set cache with explicit freshness', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/nocache') res.writeHead(200, { 'cache-control': 'NO-STORE, max-age=60' });
    else res.writeHead(302, { 'cache-control': 'max-age=60', location: '/elsewhere' });
    res.end('c');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/nocache');
  t.equal((await edge.get('/nocache')).headers['x-cache-status'], 'MISS', 'NO-STORE honoured');
  await edge.get('/redirect');
  const r = await edge.get('/redirect');
  t.equal(r.status, 302);
  t.equal(r.headers['x-cache-status'], 'HIT', '302 with max-age is cached');
});
