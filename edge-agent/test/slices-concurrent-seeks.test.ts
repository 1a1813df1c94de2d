// Two seeks into different slices of a large object nothing is known of yet,
// at the same time (players starting one video at once, one from the start,
// one at a bookmark), or a download of it and a seek: one head is made for the
// object, so every slice is kept under one version and none is fetched again. Found by bench/edge-node-cache.ts
// (slices of a 150 MiB object fetched twice in a Zipf workload): each seek made
// a head of its own, the later one replaced the other, and the slices kept
// under the replaced head's version were lost.
import t, { type Test } from 'tap';
import { request } from 'undici';
import type { ServerResponse } from 'node:http';
import { eventually } from '../../test/support/eventually.ts';
import { HOST, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const SLICE = 256 * 1024;
const SIZE = 3 * 1024 * 1024 + 777;
const BODY = Buffer.alloc(SIZE);
for (let i = 0; i < SIZE; i++) BODY[i] = (i * 11 + (i >> 9)) & 255;

/** An origin that holds its answers (200 to a plain GET, 206 to a range) until release(). */
async function heldOrigin() {
  const held: (() => void)[] = [];
  let open = false;
  const origin = await startOrigin((req, res: ServerResponse) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    const first = m === null ? 0 : Number(m[1]);
    const last = m === null ? SIZE - 1 : Math.min(Number(m[2]), SIZE - 1);
    const answer = () => {
      const head: Record<string, string> = { 'content-type': 'video/mp4', 'cache-control': 'max-age=600', etag: '"one"', 'content-length': String(last - first + 1) };
      if (m !== null) head['content-range'] = `bytes ${first}-${last}/${SIZE}`;
      res.writeHead(m === null ? 200 : 206, head);
      res.end(BODY.subarray(first, last + 1));
    };
    if (open) answer();
    else held.push(answer);
  });
  const release = () => { open = true; for (const answer of held.splice(0)) answer(); };
  return { origin, release };
}

async function setUp(t: Test) {
  const { origin, release } = await heldOrigin();
  const edge = await startAgent(snapshotFor(origin.port), { sliceBytes: SLICE, sliceThresholdBytes: 1024 * 1024, maxObjectBytes: 2 * 1024 * 1024 });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const get = async (range?: [number, number]) => {
    const res = await request(`http://127.0.0.1:${edge.port}/movie.mp4`, { headers: { host: HOST, ...(range === undefined ? {} : { range: `bytes=${range[0]}-${range[1]}` }) } });
    return { status: res.statusCode, cache: res.headers['x-cache-status'], body: Buffer.from(await res.body.arrayBuffer()) };
  };
  /** Sends the second request once the first has reached the origin; lets the origin answer once the second is under way. */
  const together = async (a: Promise<unknown>, b: () => Promise<unknown>) => {
    await origin.received(undefined, 1);
    const joined = edge.agent.proxy.collapsedFollowers;
    const second = b();
    // The second either asks the origin itself or waits for the first one's answer: then both go on.
    await eventually(() => origin.requests.length === 2 || edge.agent.proxy.collapsedFollowers > joined, 'the second request is under way');
    release();
    return Promise.all([a, second]);
  };
  return { origin, edge, get, together };
}

t.test('concurrent seeks into different slices of a new large object make one head: no slice is fetched twice', async (t) => {
  const { origin, get, together } = await setUp(t);
  const seeks: [number, number][] = [[100, 5_000], [5 * SLICE + 10, 5 * SLICE + 9_000]];
  const answers = (await together(get(seeks[0]), () => get(seeks[1]))) as Awaited<ReturnType<typeof get>>[];
  for (const [i, r] of answers.entries()) {
    t.equal(r.status, 206);
    t.ok(r.body.equals(BODY.subarray(seeks[i]![0], seeks[i]![1] + 1)), `the bytes of seek ${i}`);
  }
  const asked = origin.requests.length;
  t.equal(asked, 2, 'one origin request per slice');
  for (const [a, b] of seeks) {
    const r = await get([a, b]);
    t.equal(r.cache, 'HIT', `seek ${a}-${b} again is a hit`);
    t.ok(r.body.equals(BODY.subarray(a, b + 1)));
  }
  t.equal(origin.requests.length, asked, 'repeating both seeks costs the origin nothing');
});

t.test('a seek into a new large object while it is being downloaded keeps the download\'s slices: the next download is a hit', async (t) => {
  const { origin, edge, get, together } = await setUp(t);
  const seek: [number, number] = [5 * SLICE + 10, 5 * SLICE + 9_000];
  const [whole, part] = (await together(get(), () => get(seek))) as Awaited<ReturnType<typeof get>>[];
  t.equal(whole!.status, 200);
  t.ok(whole!.body.equals(BODY), 'the whole object');
  t.equal(part!.status, 206);
  t.ok(part!.body.equals(BODY.subarray(seek[0], seek[1] + 1)), 'the seek\'s bytes');
  await edge.agent.proxy.settled();
  const asked = origin.requests.length;
  const again = await get();
  t.equal(again.cache, 'HIT', 'the next download is a hit');
  t.ok(again.body.equals(BODY));
  t.ok((await get(seek)).body.equals(BODY.subarray(seek[0], seek[1] + 1)));
  t.equal(origin.requests.length, asked, 'no slice fetched again');
});
