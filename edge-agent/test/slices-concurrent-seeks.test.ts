// Two seeks into different slices of a large object nothing is known of yet,
// at the same time (players starting one video at once, one from the start,
// one at a bookmark): one head is made for the object, so both slices are kept
// under one version and neither is fetched again. Found by bench/edge-node-cache.ts
// (slices of a 150 MiB object fetched twice in a Zipf workload): each seek made
// a head of its own, the later one replaced the other, and the slices kept
// under the replaced head's version were lost.
import t from 'tap';
import { request } from 'undici';
import type { ServerResponse } from 'node:http';
import { eventually } from '../../test/support/eventually.ts';
import { HOST, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const SLICE = 256 * 1024;
const SIZE = 3 * 1024 * 1024 + 777;
const BODY = Buffer.alloc(SIZE);
for (let i = 0; i < SIZE; i++) BODY[i] = (i * 11 + (i >> 9)) & 255;

t.test('concurrent seeks into different slices of a new large object make one head: no slice is fetched twice', async (t) => {
  // The origin holds its answers until the test lets them go, so both seeks are under way at once.
  const held: (() => void)[] = [];
  let open = false;
  const origin = await startOrigin((req, res: ServerResponse) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '')!;
    const first = Number(m[1]);
    const last = Math.min(Number(m[2]), SIZE - 1);
    const answer = () => {
      res.writeHead(206, {
        'content-type': 'video/mp4', 'cache-control': 'max-age=600', etag: '"one"', 'content-length': String(last - first + 1),
        'content-range': `bytes ${first}-${last}/${SIZE}`,
      });
      res.end(BODY.subarray(first, last + 1));
    };
    if (open) answer();
    else held.push(answer);
  });
  const edge = await startAgent(snapshotFor(origin.port), { sliceBytes: SLICE, sliceThresholdBytes: 1024 * 1024, maxObjectBytes: 2 * 1024 * 1024 });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const seek = async (first: number, last: number) => {
    const res = await request(`http://127.0.0.1:${edge.port}/movie.mp4`, { headers: { host: HOST, range: `bytes=${first}-${last}` } });
    return { status: res.statusCode, cache: res.headers['x-cache-status'], body: Buffer.from(await res.body.arrayBuffer()) };
  };
  const seeks: [number, number][] = [[100, 5_000], [5 * SLICE + 10, 5 * SLICE + 9_000]];
  const first = seek(...seeks[0]!);
  await origin.received(undefined, 1);
  const joined = edge.agent.proxy.collapsedFollowers;
  const second = seek(...seeks[1]!);
  // The second seek either asks the origin itself or waits for the first one's answer: then both go on.
  await eventually(() => origin.requests.length === 2 || edge.agent.proxy.collapsedFollowers > joined, 'the second seek is under way');
  open = true;
  for (const answer of held.splice(0)) answer();
  for (const [i, r] of (await Promise.all([first, second])).entries()) {
    t.equal(r.status, 206);
    t.ok(r.body.equals(BODY.subarray(seeks[i]![0], seeks[i]![1] + 1)), `the bytes of seek ${i}`);
  }
  const asked = origin.requests.length;
  t.equal(asked, 2, 'one origin request per slice');
  for (const [a, b] of seeks) {
    const r = await seek(a, b);
    t.equal(r.cache, 'HIT', `seek ${a}-${b} again is a hit`);
    t.ok(r.body.equals(BODY.subarray(a, b + 1)));
  }
  t.equal(origin.requests.length, asked, 'repeating both seeks costs the origin nothing');
});
