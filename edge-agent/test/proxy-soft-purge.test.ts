// Soft purges (Fastly's): what a soft purge names is marked stale, not
// removed. The next request revalidates it with the origin by one
// conditional request (a 304 makes it fresh again, no body sent); within the
// object's stale-while-revalidate window that request is served the stale
// copy at once while the revalidation runs in the background; when the origin
// fails, stale-if-error may answer; a later hard purge removes it. A real
// agent and a real origin that counts its requests and answers If-None-Match.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { openNodeTierAtStart } from '../src/cache/index.ts';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

let down = false;
const origin = await startOrigin((req, res) => {
  if (down) {
    res.writeHead(503, { 'content-type': 'text/plain' });
    return res.end('down');
  }
  const path = req.url!;
  const cc = path.startsWith('/swr/') ? 'max-age=300, stale-while-revalidate=60' : path.startsWith('/sie/') ? 'max-age=300, stale-if-error=60' : 'max-age=300';
  const headers = { 'cache-control': cc, etag: '"v1"', 'cache-tag': `show-${path.split('/')[2]}`, 'content-type': 'text/plain' };
  if (req.headers['if-none-match'] === '"v1"') {
    res.writeHead(304, headers);
    return res.end();
  }
  res.writeHead(200, headers);
  res.end(`body of ${path}`);
});
t.teardown(() => origin.close());
const requestsFor = (path: string) => origin.requests.filter((r) => r.url === path);
let sequence = 0;

const cases = [
  { type: 'path', path: '/plain/1/a.m3u8', command: (p: string) => ({ paths: [p] }) },
  { type: 'tag', path: '/plain/2/a.m3u8', command: () => ({ tags: ['show-2'] }) },
  { type: 'wildcard', path: '/plain/3/a.m3u8', command: () => ({ paths: ['/plain/3/*'] }) },
  { type: 'all', path: '/plain/4/a.m3u8', command: () => ({}) },
] as const;

for (const c of cases) {
  t.test(`a soft ${c.type} purge: one conditional request revalidates the object, no body is fetched again`, async (t) => {
    const edge = await startAgent(snapshotFor(origin.port));
    t.teardown(() => edge.close());
    t.equal((await edge.get(c.path)).headers['x-cache-status'], 'MISS');
    t.equal((await edge.get(c.path)).headers['x-cache-status'], 'HIT');
    const result = await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: c.type, ...c.command(c.path), soft: true });
    t.match(result, { applied: true });
    const after = await edge.get(c.path);
    t.equal(after.status, 200);
    t.equal(after.body, `body of ${c.path}`, 'the kept body');
    t.equal(after.headers['x-cache-status'], 'REVALIDATED', 'revalidated with the origin before it was served');
    const asked = requestsFor(c.path);
    t.equal(asked.length, 2, 'one request after the purge');
    t.equal(asked[1].headers['if-none-match'], '"v1"', 'a conditional one');
    t.equal((await edge.get(c.path)).headers['x-cache-status'], 'HIT', 'fresh again from the 304');
    t.equal(requestsFor(c.path).length, 2);
  });
}

t.test('a hot object soft-purged: ten concurrent viewers cost the origin one conditional request', async (t) => {
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(() => edge.close());
  const path = '/plain/8/hot.m3u8';
  await edge.get(path);
  await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: 'path', paths: [path], soft: true });
  const answers = await Promise.all(Array.from({ length: 10 }, () => edge.get(path)));
  t.ok(answers.every((a) => a.status === 200 && a.body === `body of ${path}`));
  t.equal(requestsFor(path).length, 2, 'one request after the purge, for all ten');
  t.equal(requestsFor(path)[1].headers['if-none-match'], '"v1"', 'conditional');
});

t.test('within stale-while-revalidate a soft-purged object is served stale at once and revalidated once in the background', async (t) => {
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(() => edge.close());
  const path = '/swr/5/live.m3u8';
  await edge.get(path);
  await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: 'tag', tags: ['show-5'], soft: true });
  const answers = await Promise.all(Array.from({ length: 10 }, () => edge.get(path)));
  t.equal(answers[0].headers['x-cache-status'], 'UPDATING', 'the first viewer is served the stale copy at once');
  t.ok(answers.every((a) => a.status === 200 && (a.headers['x-cache-status'] === 'UPDATING' || a.headers['x-cache-status'] === 'HIT')), 'the others too, or the revalidated copy once it is back');
  await edge.agent.proxy.settled();
  const asked = requestsFor(path);
  t.equal(asked.length, 2, 'one revalidation for ten viewers');
  t.equal(asked[1].headers['if-none-match'], '"v1"');
  t.equal((await edge.get(path)).headers['x-cache-status'], 'HIT');
});

t.test('a soft-purged object answers an origin failure within stale-if-error; a later hard purge removes it', async (t) => {
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(() => { down = false; return edge.close(); });
  const path = '/sie/6/seg.ts';
  await edge.get(path);
  await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: 'path', paths: [path], soft: true });
  down = true;
  const stale = await edge.get(path);
  t.equal(stale.status, 200);
  t.equal(stale.headers['x-cache-status'], 'STALE', 'the stale copy answers the 503');
  t.equal(stale.body, `body of ${path}`);
  await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: 'path', paths: [path] });
  t.equal((await edge.get(path)).status, 503, 'after a hard purge nothing is left to answer with');
});

t.test('the node tier keeps the mark: after a restart a soft-purged object is still revalidated before it is served', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-soft-purge-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const path = '/plain/7/index.m3u8';
  let edge = await startAgent(snapshotFor(origin.port), { dataDir, nodeTier: await openNodeTierAtStart(dataDir, 8 * 1024 * 1024, () => {}) });
  await edge.get(path);
  await edge.agent.applyPurge({ sequence: ++sequence, purge_id: `p${sequence}`, endpoint_id: 'ep1', type: 'tag', tags: ['show-7'], soft: true });
  await edge.close();
  edge = await startAgent(snapshotFor(origin.port), { dataDir, nodeTier: await openNodeTierAtStart(dataDir, 8 * 1024 * 1024, () => {}) });
  t.teardown(() => edge.close());
  const after = await edge.get(path);
  t.equal(after.headers['x-cache-status'], 'REVALIDATED', 'the restarted agent revalidates it');
  t.equal(requestsFor(path).length, 2);
  t.equal(requestsFor(path)[1].headers['if-none-match'], '"v1"');
});
