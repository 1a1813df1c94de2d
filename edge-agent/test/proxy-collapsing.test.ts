import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('N concurrent misses on one key make one origin request', async (t) => {
  const origin = await startOrigin((_req, res) => {
    setTimeout(() => {
      res.writeHead(200, { 'cache-control': 'max-age=60' });
      res.end('collapsed');
    }, 200);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const N = 20;
  const results = await Promise.all(Array.from({ length: N }, () => edge.get('/hot')));
  t.equal(origin.count('/hot'), 1, 'one origin request');
  t.ok(results.every((r) => r.status === 200 && r.body === 'collapsed'), 'every viewer got the body');
});

t.test('uncacheable responses are not shared between collapsed requests', async (t) => {
  let n = 0;
  const origin = await startOrigin((_req, res) => {
    const id = ++n;
    setTimeout(() => {
      res.writeHead(200, { 'cache-control': 'private' });
      res.end(`own-${id}`);
    }, 100);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const results = await Promise.all(Array.from({ length: 5 }, () => edge.get('/p')));
  t.equal(new Set(results.map((r) => r.body)).size, 5, 'each viewer got its own private response');
});
