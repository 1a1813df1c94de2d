import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('purge by path, tag, wildcard and all', async (t) => {
  const origin = await startOrigin((req, res) => {
    const tags = req.url!.startsWith('/videos/') ? 'video, show-1' : 'page';
    res.writeHead(200, { 'cache-control': 'max-age=600', 'cache-tag': tags, 'surrogate-key': req.url === '/about' ? 'about-key' : '' });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const paths = ['/videos/a/1.ts', '/videos/a/2.ts', '/videos/b/1.ts', '/index.html', '/about', '/about?x=1'];
  const warm = async () => { for (const p of paths) await edge.get(p); };
  const status = async (p: string) => (await edge.get(p)).headers['x-cache-status'];
  await warm();
  for (const p of paths) t.equal(await status(p), 'HIT');

  edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/about'] });
  t.equal(await status('/about'), 'MISS', 'path purge');
  t.equal(await status('/about?x=1'), 'MISS', 'path purge covers query variants');
  t.equal(await status('/index.html'), 'HIT');

  edge.agent.applyPurge({ sequence: 2, purge_id: 'p2', endpoint_id: 'ep1', type: 'wildcard', paths: ['/videos/a/*'] });
  t.equal(await status('/videos/a/1.ts'), 'MISS', 'wildcard purge');
  t.equal(await status('/videos/a/2.ts'), 'MISS');
  t.equal(await status('/videos/b/1.ts'), 'HIT', 'outside the wildcard kept');

  edge.agent.applyPurge({ sequence: 3, purge_id: 'p3', endpoint_id: 'ep1', type: 'tag', tags: ['show-1'] });
  t.equal(await status('/videos/b/1.ts'), 'MISS', 'Cache-Tag purge');
  t.equal(await status('/index.html'), 'HIT');
  edge.agent.applyPurge({ sequence: 4, purge_id: 'p4', endpoint_id: 'ep1', type: 'tag', tags: ['about-key'] });
  t.equal(await status('/about'), 'MISS', 'Surrogate-Key purge');

  edge.agent.applyPurge({ sequence: 5, purge_id: 'p5', endpoint_id: '', type: 'all' });
  t.equal(await status('/index.html'), 'MISS', 'purge all');
  t.equal(edge.agent.appliedPurgeSequence, 5);
  const replay = await edge.agent.applyPurge({ sequence: 3, purge_id: 'p3', endpoint_id: 'ep1', type: 'tag', tags: ['page'] });
  t.equal(replay.applied, false, 'an already applied sequence is ignored');
  t.equal(await status('/index.html'), 'HIT');
});

t.test('a path purge names the object whatever spelling of the path it uses', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=600' });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const status = async (p: string) => (await edge.get(p)).headers['x-cache-status'];
  await edge.get('/~user/caf%C3%A9');
  t.equal(await status('/~user/caf%C3%A9'), 'HIT');
  t.same(edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['https://cdn.test/%7Euser/x/../caf%c3%a9'] }), { applied: true, purged: 1 });
  t.equal(await status('/~user/caf%C3%A9'), 'MISS', 'purged through its normalised path');
});
