// Regression (issue 21 item 6): a path purge did not cover fills already in
// flight. A miss (or a prefetch) whose origin fetch began before the purge
// stored the old object after it, and that object was then served as a HIT
// for its whole TTL (5 of 5 rounds, origin answering in 800 ms). A path purge
// now records a generation for the path, as tag, wildcard and "all" purges
// do, and a fill that began before it does not store what it fetched.
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

async function heldOrigin(t: Test) {
  let version = 1;
  let release: (() => void) | null = null;
  let holding = false;
  const origin = await startOrigin((req, res) => {
    const answer = `v${version}`;
    const send = () => {
      res.writeHead(200, { 'cache-control': 'public, max-age=600', 'content-type': 'text/plain' });
      res.end(answer);
    };
    if (holding && req.url === '/held') release = send;
    else send();
  });
  t.teardown(() => origin.close());
  return {
    origin,
    /** The next request for /held waits until released, answering what the origin had when it arrived. */
    hold: () => { holding = true; },
    release: () => { holding = false; version++; release?.(); },
  };
}

t.test('regression: a miss in flight when a path purge is applied does not store the old object after it', async (t) => {
  const held = await heldOrigin(t);
  const edge = await startAgent(snapshotFor(held.origin.port));
  t.teardown(() => edge.close());
  held.hold();
  const viewer = edge.get('/held');
  await held.origin.received('/held');
  edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/held'] });
  held.release();
  const first = await viewer;
  t.equal(first.body, 'v1', 'the viewer that asked before the purge gets what the origin answered it');
  const next = await edge.get('/held');
  t.not(next.headers['x-cache-status'], 'HIT', 'the old object was not stored');
  t.equal(next.body, 'v2');
  t.equal((await edge.get('/held')).headers['x-cache-status'], 'HIT', 'what is fetched after the purge is cached');
});

t.test('regression: a prefetch in flight when a path purge is applied does not store the old object after it', async (t) => {
  const held = await heldOrigin(t);
  const edge = await startAgent(snapshotFor(held.origin.port));
  t.teardown(() => edge.close());
  held.hold();
  const prefetch = edge.agent.prefetch('ep1', ['/held']);
  await held.origin.received('/held');
  edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['https://cdn.test/held'] });
  held.release();
  t.match(await prefetch, { fetched: 1, failed: 0 });
  const next = await edge.get('/held');
  t.not(next.headers['x-cache-status'], 'HIT');
  t.equal(next.body, 'v2');
});

t.test('a fill that begins after a path purge is stored as before; the purge record of the path expires with the others', async (t) => {
  const held = await heldOrigin(t);
  const edge = await startAgent(snapshotFor(held.origin.port));
  t.teardown(() => edge.close());
  edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/held'] });
  await edge.get('/held');
  t.equal((await edge.get('/held')).headers['x-cache-status'], 'HIT');
});
