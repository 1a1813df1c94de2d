// The node-wide cache tier (LMDB, shared by every worker of a node): objects
// evicted from a worker's memory are hits from it; an object one worker
// fetched is a hit at another with no origin fetch (Vary'd ones too); purges
// reach it from any worker, and a worker that applied a purge never serves an
// object another worker stored from a fill begun before it; it is kept across
// a restart (test/flows/edge-node-cache.test.ts: with a control plane, held
// until the purges missed meanwhile are applied). Two EdgeAgent instances on one store stand for two workers here;
// test/flows/edge-node-cache.test.ts runs the real WORKERS=2 process.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { openNodeTier, openNodeTierAtStart } from '../src/cache/index.ts';
import { startAgent, startOrigin, snapshotFor, type TestAgent } from './helpers.ts';

const SIZE = 20 * 1024;
const bodyFor = (path: string) => Buffer.alloc(SIZE, path.charCodeAt(1)).toString('latin1');
const NODE_BYTES = 10 * 1024 * 1024;

async function setup(t: Test) {
  const origin = await startOrigin((req, res) => {
    const path = req.url!.split('?')[0]!;
    const headers: Record<string, string> = { 'content-type': 'application/octet-stream', 'cache-control': 'max-age=600', 'cache-tag': `t-${path.slice(1)}` };
    if (path === '/varied') headers.vary = 'accept-language';
    res.writeHead(200, headers);
    res.end(path === '/varied' ? `lang ${req.headers['accept-language']}` : bodyFor(path), 'latin1');
  });
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-node-tier-test-'));
  t.teardown(async () => { await origin.close(); rmSync(dataDir, { recursive: true, force: true }); });
  const agents: TestAgent[] = [];
  /** A worker: its own memory (room for about three 20 KiB objects), the node's one tier. */
  const worker = async (first = false) => {
    const nodeTier = first ? await openNodeTierAtStart(dataDir, NODE_BYTES, () => {}) : await openNodeTier(dataDir, NODE_BYTES);
    const edge = await startAgent(snapshotFor(origin.port), { dataDir: join(dataDir, `w${agents.length}`), memoryBytes: 64 * 1024, nodeTier });
    agents.push(edge);
    return edge;
  };
  t.teardown(async () => { for (const a of agents) await a.close(); });
  return { origin, worker };
}

t.test('objects evicted from memory are hits from the node tier; purges reach it; a restart keeps it', async (t) => {
  const { origin, worker } = await setup(t);
  let edge = await worker(true);
  const paths = ['/a', '/b', '/c', '/d', '/e', '/f'];
  for (const p of paths) t.equal((await edge.get(p)).headers['x-cache-status'], 'MISS', `${p} fetched`);
  const store = edge.agent.store;
  await store.settled();
  t.ok(store.memory.size < paths.length, `only ${store.memory.size} objects fit in memory`);
  t.equal(store.objectCount, paths.length, 'the node tier holds every object');
  t.ok(store.diskBytes > paths.length * SIZE, 'with their bytes');
  const a = await edge.get('/a');
  t.equal(a.headers['x-cache-status'], 'HIT', 'an object evicted from memory is a hit from the node tier');
  t.equal(a.body, bodyFor('/a'), 'with its full body');
  t.equal(origin.count('/a'), 1, 'the origin was not asked again');

  t.match(await edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/b'] }), { applied: true }, 'a path purge is applied (and awaited) before its answer');
  await edge.agent.applyPurge({ sequence: 2, purge_id: 'p2', endpoint_id: 'ep1', type: 'tag', tags: ['t-c'] });
  t.equal(store.objectCount, paths.length - 2, 'the purged objects are gone from the node tier');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS', 'path purge reached the node tier');
  t.equal((await edge.get('/c')).headers['x-cache-status'], 'MISS', 'tag purge reached the node tier');
  t.equal(origin.count('/b'), 2);
  t.equal(origin.count('/c'), 2);

  await edge.close();
  edge = await worker(true);
  t.equal(edge.agent.store.objectCount, paths.length, 'a restart keeps the node tier (the purged objects were fetched again)');
  t.equal((await edge.get('/d')).headers['x-cache-status'], 'HIT', 'its objects are hits after the restart');
  t.equal(origin.count('/d'), 1);
});

t.test('an object one worker fetched is a hit at another without an origin fetch, Vary\'d ones too', async (t) => {
  const { origin, worker } = await setup(t);
  const one = await worker(true);
  const two = await worker();
  t.equal((await one.get('/shared')).headers['x-cache-status'], 'MISS');
  await one.agent.store.settled();
  const atTwo = await two.get('/shared');
  t.equal(atTwo.headers['x-cache-status'], 'HIT', 'the other worker hits');
  t.equal(atTwo.body, bodyFor('/shared'));
  t.equal(origin.count('/shared'), 1, 'one origin fetch for the node');

  t.equal((await one.get('/varied', { 'accept-language': 'fr' })).body, 'lang fr');
  t.equal((await one.get('/varied', { 'accept-language': 'de' })).body, 'lang de');
  await one.agent.store.settled();
  const fr = await two.get('/varied', { 'accept-language': 'fr' });
  t.equal(fr.headers['x-cache-status'], 'HIT', 'a Vary\'d object is a hit at the other worker');
  t.equal(fr.body, 'lang fr', 'its own variant');
  t.equal((await two.get('/varied', { 'accept-language': 'de' })).body, 'lang de');
  t.equal(origin.count('/varied'), 2, 'one fetch per variant for the node');
});

t.test('a purge applied by any worker reaches the node tier, and no worker serves what it covers afterwards', async (t) => {
  const { origin, worker } = await setup(t);
  const one = await worker(true);
  const two = await worker();
  for (const p of ['/p1', '/p2', '/p3']) await one.get(p);
  await one.agent.store.settled();
  t.equal((await two.get('/p1')).headers['x-cache-status'], 'HIT', 'the second worker holds /p1 in memory too');
  // The second worker alone applies the tag purge first (the primary sends it to each in turn).
  await two.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'tag', tags: ['t-p1'] });
  t.equal((await one.get('/p2')).headers['x-cache-status'], 'HIT');
  await one.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'tag', tags: ['t-p1'] });
  t.equal((await one.get('/p1')).headers['x-cache-status'], 'MISS', 'the first worker misses');
  await one.agent.store.settled();
  t.equal((await two.get('/p1')).headers['x-cache-status'], 'HIT', 'and the refetched object is shared again');
  t.equal(origin.count('/p1'), 2);
});

t.test('a worker that applied a purge never serves an object another stored from a fill begun before it', async (t) => {
  let release: (() => void) | null = null;
  const origin = await startOrigin((req, res) => {
    const send = () => { res.writeHead(200, { 'cache-control': 'max-age=600', 'cache-tag': 'live' }); res.end(`fill ${origin.count('/live')}`); };
    if (req.url === '/live' && release === null && origin.count('/live') === 1) release = send;
    else send();
  });
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-node-tier-race-'));
  const one = await startAgent(snapshotFor(origin.port), { dataDir: join(dataDir, 'w0'), memoryBytes: 1 << 20, nodeTier: await openNodeTierAtStart(dataDir, NODE_BYTES, () => {}) });
  const two = await startAgent(snapshotFor(origin.port), { dataDir: join(dataDir, 'w1'), memoryBytes: 1 << 20, nodeTier: await openNodeTier(dataDir, NODE_BYTES) });
  t.teardown(async () => { await one.close(); await two.close(); await origin.close(); rmSync(dataDir, { recursive: true, force: true }); });
  // The first worker's fill begins; the purge reaches the second worker; the fill then ends and is stored by the
  // first worker (which has not seen the purge yet) in the node tier.
  const pending = one.get('/live');
  await origin.received('/live', 1);
  await two.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'tag', tags: ['live'] });
  release!();
  t.equal((await pending).body, 'fill 1');
  await one.agent.store.settled();
  const atTwo = await two.get('/live');
  t.not(atTwo.body, 'fill 1', 'the second worker does not serve the object from the fill begun before its purge');
  t.equal(atTwo.headers['x-cache-status'], 'MISS');
});

/** A sample's value in a Prometheus exposition (NaN when absent). */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

t.test('each tier\'s lookups, fills, bytes and evictions are on /metrics, and a hit from the node tier says so in Cache-Status', async (t) => {
  const { worker } = await setup(t);
  const edge = await worker(true);
  for (const p of ['/a', '/b', '/c', '/d', '/e']) await edge.get(p); // memory has room for about three
  await edge.agent.store.settled();
  t.match((await edge.get('/e')).headers['cache-status'], /; hit; ttl=\d+$/, 'a hit from the worker\'s memory names no tier');
  t.match((await edge.get('/a')).headers['cache-status'], /; hit; ttl=\d+; detail=node$/, 'a hit read from the node tier names it');
  t.match((await edge.get('/a')).headers['cache-status'], /; hit; ttl=\d+$/, 'the next hit is the memory tier\'s (promoted)');
  const text = await edge.agent.metrics.registry.metrics();
  t.equal(sample(text, 'edge_cache_tier_fills_total{tier="memory"}'), 5);
  t.equal(sample(text, 'edge_cache_tier_fills_total{tier="node"}'), 5);
  t.equal(sample(text, 'edge_cache_tier_fill_bytes_total{tier="node"}'), 5 * SIZE);
  t.equal(sample(text, 'edge_cache_tier_lookups_total{tier="node",result="hit"}'), 1, 'one lookup answered by the node tier');
  t.equal(sample(text, 'edge_cache_tier_lookups_total{tier="node",result="miss"}'), 5, 'the five first misses asked it too');
  t.equal(sample(text, 'edge_cache_tier_lookups_total{tier="memory",result="hit"}'), 2);
  t.ok(sample(text, 'edge_cache_tier_evictions_total{tier="memory"}') >= 2, 'the memory tier evicted to stay within its bound');
  t.equal(sample(text, 'edge_cache_tier_evictions_total{tier="node"}'), 0);
  t.ok(sample(text, 'edge_cache_bytes{tier="node"}') > 5 * SIZE, 'the node tier\'s bytes');
  t.equal(sample(text, 'edge_cache_objects'), 5, 'objects counted once (the node tier holds them all)');
  t.equal(sample(text, 'edge_cache_slice_fills_total'), 0);
});
