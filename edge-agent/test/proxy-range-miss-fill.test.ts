// Issue 25, item 9: after a range miss the viewer's Range request goes to the
// origin as sent (RFC 9110 §14.2: the 206 is passed through, never stored),
// and the cache is filled by one background request of the edge's own: a clean
// unconditional GET without the viewer's Range, conditional and credential
// fields (RFC 9111 §3.4 stores only complete responses), one per object
// however many range misses arrive meanwhile.
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

const BODY = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');

async function setUp(t: Test, extra: Parameters<typeof snapshotFor>[1] = {}) {
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const origin = await startOrigin((req, res) => {
    const range = req.headers.range;
    if (range) {
      const [s, e] = range.slice(6).split('-').map(Number);
      res.writeHead(206, { 'cache-control': 'max-age=300', 'content-range': `bytes ${s}-${e}/${BODY.length}` });
      return res.end(BODY.subarray(s, e + 1));
    }
    // The full fill waits until the test has sent its range misses, so they meet it in flight.
    void held.then(() => {
      res.writeHead(200, { 'cache-control': 'max-age=300', 'content-type': 'video/mp4', vary: 'Cookie' });
      res.end(BODY);
    });
  });
  const edge = await startAgent(snapshotFor(origin.port, extra));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  return { origin, edge, release };
}

t.test('RFC 9110 §14.2 / RFC 9111 §3.4: the fill after a range miss is one clean unconditional GET without the viewer\'s credentials', async (t) => {
  const { origin, edge, release } = await setUp(t);
  const viewer = { range: 'bytes=0-4', 'if-none-match': '"old"', 'if-modified-since': new Date(0).toUTCString(), cookie: 'session=secret; theme=dark' };
  const first = edge.get('/v.mp4', viewer);
  await origin.received('/v.mp4', 2); // the range request and the fill
  const more = [edge.get('/v.mp4', { range: 'bytes=5-9' }), edge.get('/v.mp4', { range: 'bytes=10-14', cookie: 'x=1' })];
  await origin.received('/v.mp4', 4);
  release();
  const answers = await Promise.all([first, ...more]);
  t.same(answers.map((a) => a.status), [206, 206, 206]);
  t.equal(answers[0].body, '01234');
  await edge.agent.proxy.settled();

  const fills = origin.requests.filter((r) => r.headers.range === undefined);
  t.equal(fills.length, 1, 'one fill for three range misses');
  const fill = fills[0].headers;
  for (const name of ['range', 'if-range', 'if-none-match', 'if-modified-since', 'if-match', 'if-unmodified-since', 'cookie', 'authorization']) {
    t.equal(fill[name], undefined, `the fill sends no ${name}`);
  }
  t.equal(fills[0].method, 'GET');
  const passed = origin.requests.find((r) => r.headers.range === 'bytes=0-4')!.headers;
  t.equal(passed.cookie, 'session=secret; theme=dark', 'the viewer\'s own range request went as sent');
  t.equal(origin.count('/v.mp4'), 4, 'three range requests and one fill');

  const seek = await edge.get('/v.mp4', { range: 'bytes=30-35' });
  t.equal(seek.status, 206);
  t.equal(seek.body, 'uvwxyz');
  t.equal(seek.headers['x-cache-status'], 'HIT', 'a later seek without cookies is a hit on the stored object (keyed by what the fill sent)');
});

t.test('RFC 9111 §3.4: cookies a cache rule keys on are the only ones the fill sends', async (t) => {
  const { origin, edge, release } = await setUp(t, { cache_rules: [{ id: 'media', ttl_seconds: 300, match: { paths: ['/*'] }, cache_key: { include_cookies: ['variant'] } }] });
  release();
  await edge.get('/k.mp4', { range: 'bytes=0-1', cookie: 'session=secret; variant=hd' });
  await edge.agent.proxy.settled();
  const fill = origin.requests.find((r) => r.headers.range === undefined)!;
  t.equal(fill.headers.cookie, 'variant=hd', 'the keyed cookie only');
});
