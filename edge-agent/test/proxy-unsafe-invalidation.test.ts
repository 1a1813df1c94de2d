import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('a successful unsafe method invalidates the URL, Location and Content-Location', async (t) => {
  let gen = 0;
  const origin = await startOrigin((req, res) => {
    if (req.method === 'POST') {
      req.resume();
      req.on('end', () => {
        gen++;
        res.writeHead(201, { location: '/items/2', 'content-location': `http://${req.headers.host}/items/3` });
        res.end('created');
      });
      return;
    }
    if (req.method === 'DELETE' && req.url === '/fail') {
      res.writeHead(500);
      res.end();
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=600' });
    res.end(`${req.url} gen ${gen}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const p of ['/items', '/items/2', '/items/3', '/fail']) await edge.get(p);
  for (const p of ['/items', '/items/2', '/items/3']) t.equal((await edge.get(p)).headers['x-cache-status'], 'HIT');
  const post = await edge.get('/items', { 'content-type': 'text/plain' }, 'POST', 'new item');
  t.equal(post.status, 201);
  t.equal(post.body, 'created');
  for (const p of ['/items', '/items/2', '/items/3']) {
    const r = await edge.get(p);
    t.equal(r.headers['x-cache-status'], 'MISS', `${p} invalidated`);
    t.equal(r.body, `${p} gen 1`);
  }
  await edge.get('/fail', {}, 'DELETE');
  t.equal((await edge.get('/fail')).headers['x-cache-status'], 'HIT', 'a failed unsafe request invalidates nothing');
});
