import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('fresh response is stored and served from cache with Age, Date and Cache-Status', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
    res.end(`hello ${req.url}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const a = await edge.get('/a');
  t.equal(a.status, 200);
  t.equal(a.body, 'hello /a');
  t.equal(a.headers['x-cache-status'], 'MISS');
  t.match(a.headers['cache-status'], /fwd=miss/);
  const b = await edge.get('/a');
  t.equal(b.body, 'hello /a');
  t.equal(b.headers['x-cache-status'], 'HIT');
  t.match(b.headers['cache-status'], /^edge-local; hit/);
  t.ok(b.headers.date, 'Date present on a cached response');
  t.match(b.headers.age, /^\d+$/, 'Age present on a cached response');
  t.equal(origin.count('/a'), 1, 'origin asked once');
  const head = await edge.get('/a', {}, 'HEAD');
  t.equal(head.status, 200);
  t.equal(head.body, '');
  t.equal(head.headers['x-cache-status'], 'HIT', 'HEAD answered from the cached GET');
  t.equal(head.headers['content-length'], String('hello /a'.length));
  t.equal(origin.count('/a'), 1);
});

t.test('unknown host gets 421 unless a default endpoint is configured', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('x'));
  const edge = await startAgent(snapshotFor(origin.port));
  const edgeDefault = await startAgent(snapshotFor(origin.port), { defaultEndpointId: 'ep1' });
  t.teardown(async () => { await edge.close(); await edgeDefault.close(); await origin.close(); });
  t.equal((await edge.get('/', { host: 'other.test' })).status, 421);
  t.equal((await edgeDefault.get('/', { host: 'other.test' })).status, 200);
});

t.test('response without freshness or validators is not stored', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('plain'));
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/p');
  const b = await edge.get('/p');
  t.equal(b.headers['x-cache-status'], 'MISS');
  t.equal(origin.count('/p'), 2);
});
