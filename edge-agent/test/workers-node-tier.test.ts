// An agent process with WORKERS=2 and a node tier (CACHE_DISK_BYTES): the two
// workers share one cache, so an object one worker fetched is a hit at the
// other and the origin sees one fetch per object for the node however the
// connections spread; /healthz counts each object once; the node tier is kept
// across a restart (from a config file there are no purges to miss); misses
// at both workers at once cost one origin fetch; workers
// whose primary is killed while they fill exit on their own.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { agentHealth, agentMetrics, viewerGet } from '../../test/support/edge-deployment.ts';
import { eventually } from '../../test/support/eventually.ts';
import { exitOf, startAgentProcess, startOrigin } from './helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'edge-node-tier-'));
const MOVIE = Buffer.alloc(3 * 1024 * 1024 + 1000);
for (let i = 0; i < MOVIE.length; i++) MOVIE[i] = 65 + ((i * 13 + (i >> 10)) % 26); // letters: the viewer helper reads text
const origin = await startOrigin((req, res) => {
  if (req.url!.startsWith('/movie/')) {
    // A large object that answers byte ranges (slices of it are kept); /movie/slow/ after a while.
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    const first = m === null ? 0 : Number(m[1]);
    const last = m === null ? MOVIE.length - 1 : Math.min(Number(m[2]), MOVIE.length - 1);
    const head: Record<string, string> = { 'content-type': 'video/mp4', 'cache-control': 'max-age=600', etag: '"m1"', 'content-length': String(last - first + 1) };
    if (m !== null) head['content-range'] = `bytes ${first}-${last}/${MOVIE.length}`;
    const answer = () => { res.writeHead(m === null ? 200 : 206, head); res.end(MOVIE.subarray(first, last + 1)); };
    if (req.url!.startsWith('/movie/slow/')) setTimeout(answer, 300);
    else answer();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'cache-control': 'max-age=600' });
  // /slow/ answers after a while, so that misses at both workers overlap.
  if (req.url!.startsWith('/slow/')) setTimeout(() => res.end(Buffer.alloc(10 * 1024, 2)), 300);
  else res.end(Buffer.alloc(10 * 1024, 1));
});
t.teardown(() => origin.close());
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify({
  version: 1,
  endpoints: [{ id: 'a', hostname: 'a.cdn.test', default_origin_id: 'a-o', origins: [{ id: 'a-o', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }] }],
}));
const env = { CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), WORKERS: '2', CACHE_MEMORY_BYTES: '32MiB', CACHE_DISK_BYTES: '64MiB', SHUTDOWN_TIMEOUT_MS: '3000', CACHE_SLICE_BYTES: '256KiB' };

t.test('two workers share one node tier: one origin fetch per object for the node, kept across a restart', async (t) => {
  let agent = await startAgentProcess(env);
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  t.equal(agent.logs.filter((l) => l.includes('"msg":"worker listening"')).length, 2);
  // Each GET on a connection of its own: the kernel spreads them over the two workers.
  const get = (path: string) => viewerGet(agent.port, 'a.cdn.test', path, { connection: 'close' });
  t.equal((await get('/video/seg-1.ts')).headers['x-cache-status'], 'MISS');
  await eventually(async () => (await agentHealth(agent)).cache_objects === 1, 'the node tier holds the object (counted once)');
  const answers = [];
  for (let i = 0; i < 20; i++) answers.push(await get('/video/seg-1.ts'));
  t.same(answers.map((r) => r.status), new Array(20).fill(200));
  t.same(new Set(answers.map((r) => r.headers['x-cache-status'])), new Set(['HIT']), 'every connection is a hit, whichever worker takes it');
  t.equal(origin.count('/video/seg-1.ts'), 1, 'the origin fetched the object once for the node');
  const scrape = await agentMetrics(agent);
  t.match(scrape, /^edge_cache_objects 1$/m, '/metrics counts the node tier\'s object once, not once per worker');
  t.match(scrape, /^edge_cache_tier_lookups_total\{tier="node",result="hit"\} [1-9]/m, 'hits at the other worker came from the node tier');

  agent.child.kill('SIGTERM');
  t.equal(await exitOf(agent.child), 0);
  agent = await startAgentProcess(env);
  const after = await Promise.all(Array.from({ length: 10 }, () => viewerGet(agent.port, 'a.cdn.test', '/video/seg-1.ts', { connection: 'close' })));
  t.same(new Set(after.map((r) => r.headers['x-cache-status'])), new Set(['HIT']), 'the restarted workers hit what the node tier kept');
  t.equal(origin.count('/video/seg-1.ts'), 1, 'no origin fetch after the restart');
});

t.test('concurrent misses at both workers cost the origin one fetch: the other worker waits for the fill', async (t) => {
  const agent = await startAgentProcess(env);
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  for (const path of ['/slow/a', '/slow/b']) {
    const answers = await Promise.all(Array.from({ length: 16 }, () => viewerGet(agent.port, 'a.cdn.test', path, { connection: 'close' })));
    t.same(new Set(answers.map((r) => r.status)), new Set([200]));
    t.same(new Set(answers.map((r) => r.body.length)), new Set([10 * 1024]));
    t.equal(origin.count(path), 1, `one origin fetch for ${path} however the connections spread`);
  }
  t.match(await agentMetrics(agent), /^edge_cache_node_fill_turns_total\{turn="follow"\} [1-9]/m, 'the other worker\'s waits for the fill are counted');
});

t.test('slices of a large object are shared by the workers: one origin request per slice for the node, concurrent seeks included', async (t) => {
  const agent = await startAgentProcess(env);
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  const SLICE = 256 * 1024;
  const seek = (path: string, first: number, last: number) => viewerGet(agent.port, 'a.cdn.test', path, { connection: 'close', range: `bytes=${first}-${last}` });
  // Sequential seeks over new connections, in four slices, each asked several times.
  const seeks = [[10, 99], [SLICE + 5, SLICE + 500], [3 * SLICE, 3 * SLICE + 9], [20, 30], [SLICE + 1000, SLICE + 1001], [3 * SLICE + 100, 3 * SLICE + 200], [2 * SLICE, 2 * SLICE + 1]];
  for (const [first, last] of [...seeks, ...seeks]) {
    const r = await seek('/movie/a.mp4', first, last);
    t.equal(r.status, 206);
    t.equal(r.body, MOVIE.subarray(first, last + 1).toString('latin1'), `bytes ${first}-${last}`);
  }
  t.equal(origin.count('/movie/a.mp4'), 4, 'one origin request per slice for the node, whichever worker each seek reached');
  const together = await Promise.all(Array.from({ length: 16 }, () => seek('/movie/slow/b.mp4', 2 * SLICE + 7, 2 * SLICE + 70)));
  t.same(new Set(together.map((r) => r.status)), new Set([206]));
  t.ok(together.every((r) => r.body === MOVIE.subarray(2 * SLICE + 7, 2 * SLICE + 71).toString('latin1')));
  t.equal(origin.count('/movie/slow/b.mp4'), 1, '16 concurrent seeks into one new slice at both workers: one origin request');
});

t.test('workers whose primary is killed while they write fills to the node tier exit on their own', async (t) => {
  const agent = await startAgentProcess(env);
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  const pids = agent.logs.filter((l) => l.includes('"msg":"worker listening"')).map((l) => Number(/"pid":(\d+)/.exec(l)![1]));
  t.equal(pids.length, 2);
  const alive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };
  // Many fills at once, and the primary killed as the first answers arrive: node-tier writes are under way.
  const fills = Array.from({ length: 60 }, (_, i) => viewerGet(agent.port, 'a.cdn.test', `/fill/${i}`, { connection: 'close' }).catch(() => null));
  await Promise.race(fills);
  agent.child.kill('SIGKILL');
  await Promise.all(fills);
  await eventually(() => pids.every((pid) => !alive(pid)), 'both workers exited after their primary was killed');
  t.pass('no worker outlived its primary');
});
