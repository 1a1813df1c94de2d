// The disk tier: objects evicted from the memory LRU are served from disk, purges
// remove them from disk too, and a restart starts with an empty disk tier.
import t from 'tap';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

const SIZE = 20 * 1024;
const bodyFor = (path: string) => Buffer.alloc(SIZE, path.charCodeAt(1)).toString('latin1');

t.test('evicted objects are served from disk; purges reach the disk; a restart wipes it', async (t) => {
  const origin = await startOrigin((req, res) => {
    const path = req.url!;
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'cache-control': 'max-age=600', 'cache-tag': `t-${path.slice(1)}` });
    res.end(bodyFor(path), 'latin1');
  });
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-disk-test-'));
  const cacheDir = join(dataDir, 'cache');
  // Room for about three 20 KiB objects in memory; the rest spill to disk.
  const options = { dataDir, memoryBytes: 64 * 1024, diskBytes: 10 * 1024 * 1024 };
  let edge = await startAgent(snapshotFor(origin.port), options);
  t.teardown(async () => { await edge.close(); await origin.close(); rmSync(dataDir, { recursive: true, force: true }); });

  const paths = ['/a', '/b', '/c', '/d', '/e', '/f'];
  for (const p of paths) t.equal((await edge.get(p)).headers['x-cache-status'], 'MISS', `${p} fetched`);
  const store = edge.agent.store;
  await store.settled(); // disk writes are asynchronous
  t.ok(store.memory.size < paths.length, `only ${store.memory.size} objects fit in memory`);
  t.ok(store.diskBytes > 0, 'the rest went to disk');
  t.equal(store.objectCount, paths.length, 'every object is still cached (memory + disk)');
  t.ok(readdirSync(cacheDir).length >= paths.length - store.memory.size, 'one file per object on disk');

  const a = await edge.get('/a');
  t.equal(a.headers['x-cache-status'], 'HIT', 'the evicted object is a hit from disk');
  t.equal(a.body, bodyFor('/a'), 'with its full body');
  t.equal(origin.count('/a'), 1, 'the origin was not asked again');

  // /b and /c were evicted as /a came back (or before): purge them by path and by tag.
  await edge.get('/d');
  await edge.get('/e');
  await edge.get('/f');
  await store.settled();
  const onDiskBefore = readdirSync(cacheDir).length;
  t.ok(onDiskBefore > 0);
  t.same(edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/b'] }), { applied: true, purged: 1 });
  edge.agent.applyPurge({ sequence: 2, purge_id: 'p2', endpoint_id: 'ep1', type: 'tag', tags: ['t-c'] });
  await store.settled(); // the lurker's sweep and the file deletions
  t.equal(readdirSync(cacheDir).length, onDiskBefore - 2, 'the purged objects\' files are gone from disk');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS', 'path purge reached the disk tier');
  t.equal((await edge.get('/c')).headers['x-cache-status'], 'MISS', 'tag purge reached the disk tier');
  t.equal(origin.count('/b'), 2);
  t.equal(origin.count('/c'), 2);

  // Restart on the same data directory: the disk tier starts empty (it may have missed purges while down).
  await edge.close();
  t.ok(existsSync(cacheDir));
  edge = await startAgent(snapshotFor(origin.port), options);
  t.same(readdirSync(cacheDir), [], 'cache directory wiped at start');
  t.equal(edge.agent.store.objectCount, 0);
  t.equal((await edge.get('/d')).headers['x-cache-status'], 'MISS', 'nothing served from the old disk tier');
});
