// A range miss goes to the origin as one request of the edge's own for the
// aligned slice holding the range's first byte (proxy/slices.ts): an
// unconditional GET with that Range and without the viewer's conditional and
// credential fields (the slice serves every later viewer), one per slice
// however many range misses of it arrive meanwhile. A small object comes whole
// in its first slice and is kept whole (RFC 9111 §3.4: a complete response).
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';
import { eventually } from '../../test/support/eventually.ts';

const BODY = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');

async function setUp(t: Test, extra: Parameters<typeof snapshotFor>[1] = {}) {
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const origin = await startOrigin((req, res) => {
    const range = req.headers.range;
    // The slice waits until the test has sent its range misses, so they meet it in flight.
    void held.then(() => {
      if (range) {
        const [s, e] = range.slice(6).split('-').map(Number);
        const last = Math.min(e, BODY.length - 1);
        res.writeHead(206, { 'cache-control': 'max-age=300', 'content-type': 'video/mp4', vary: 'Cookie', 'content-range': `bytes ${s}-${last}/${BODY.length}` });
        return res.end(BODY.subarray(s, last + 1));
      }
      res.writeHead(200, { 'cache-control': 'max-age=300', 'content-type': 'video/mp4', vary: 'Cookie' });
      res.end(BODY);
    });
  });
  const edge = await startAgent(snapshotFor(origin.port, extra));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  return { origin, edge, release };
}

t.test('RFC 9111 §3.4: concurrent range misses of one slice cost one clean request for it, without the viewer\'s conditionals or credentials', async (t) => {
  const { origin, edge, release } = await setUp(t);
  const viewer = { range: 'bytes=0-4', 'if-none-match': '"old"', 'if-modified-since': new Date(0).toUTCString(), cookie: 'session=secret; theme=dark' };
  const first = edge.get('/v.mp4', viewer);
  await origin.received('/v.mp4', 1);
  const more = [edge.get('/v.mp4', { range: 'bytes=5-9' }), edge.get('/v.mp4', { range: 'bytes=10-14', cookie: 'x=1' })];
  await eventually(() => edge.agent.proxy.collapsedFollowers === 2, 'both later misses wait for the first one\'s slice');
  release();
  const answers = await Promise.all([first, ...more]);
  t.same(answers.map((a) => a.status), [206, 206, 206]);
  t.same(answers.map((a) => a.body), ['01234', '56789', 'abcde']);
  t.equal(origin.count('/v.mp4'), 1, 'one request for three range misses');
  const fill = origin.requests[0];
  t.equal(fill.method, 'GET');
  t.equal(fill.headers.range, 'bytes=0-1048575', 'the aligned first slice, not the viewer\'s range');
  for (const name of ['if-range', 'if-none-match', 'if-modified-since', 'if-match', 'if-unmodified-since', 'cookie', 'authorization']) {
    t.equal(fill.headers[name], undefined, `the slice request sends no ${name}`);
  }

  const seek = await edge.get('/v.mp4', { range: 'bytes=30-35' });
  t.equal(seek.status, 206);
  t.equal(seek.body, 'uvwxyz');
  t.equal(seek.headers['x-cache-status'], 'HIT', 'a later seek without cookies is a hit on the stored object (keyed by what the request sent)');
  t.equal(origin.count('/v.mp4'), 1);
});

t.test('RFC 9111 §3.4: cookies a cache rule keys on are the only ones a slice request sends', async (t) => {
  const { origin, edge, release } = await setUp(t, { cache_rules: [{ id: 'media', ttl_seconds: 300, match: { paths: ['/*'] }, cache_key: { include_cookies: ['variant'] } }] });
  release();
  await edge.get('/k.mp4', { range: 'bytes=0-1', cookie: 'session=secret; variant=hd' });
  t.equal(origin.requests[0].headers.cookie, 'variant=hd', 'the keyed cookie only');
});
