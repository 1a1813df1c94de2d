import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

const BODY = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz');

t.test('byte ranges are served as 206 from a cached full object', async (t) => {
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=60', etag: '"seg"', 'content-type': 'video/mp2t' });
    res.end(BODY);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/seg.ts');
  const r = await edge.get('/seg.ts', { range: 'bytes=10-19' });
  t.equal(r.status, 206);
  t.equal(r.body, 'abcdefghij');
  t.equal(r.headers['content-range'], `bytes 10-19/${BODY.length}`);
  t.equal(r.headers['content-length'], '10');
  t.equal(r.headers['x-cache-status'], 'HIT');
  const suffix = await edge.get('/seg.ts', { range: 'bytes=-3' });
  t.equal(suffix.body, 'xyz');
  const open = await edge.get('/seg.ts', { range: 'bytes=30-' });
  t.equal(open.body, 'uvwxyz');
  const bad = await edge.get('/seg.ts', { range: 'bytes=100-200' });
  t.equal(bad.status, 416);
  t.equal(bad.headers['content-range'], `bytes */${BODY.length}`);
  const ifRangeMismatch = await edge.get('/seg.ts', { range: 'bytes=0-1', 'if-range': '"other"' });
  t.equal(ifRangeMismatch.status, 200, 'If-Range mismatch gives the full object');
  t.equal(origin.count('/seg.ts'), 1);
});

t.test('a range miss asks the origin for the slice holding it: a small object comes whole in it, is kept, and a later seek hits', async (t) => {
  const origin = await startOrigin((req, res) => {
    const range = req.headers.range;
    if (range) {
      const [s, e] = range.slice(6).split('-').map(Number);
      const last = Math.min(e, BODY.length - 1);
      res.writeHead(206, { 'cache-control': 'max-age=60', 'content-range': `bytes ${s}-${last}/${BODY.length}` });
      res.end(BODY.subarray(s, last + 1));
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=60' });
    res.end(BODY);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const first = await edge.get('/v.mp4', { range: 'bytes=0-4' });
  t.equal(first.status, 206);
  t.equal(first.body, '01234');
  t.equal(first.headers['content-range'], `bytes 0-4/${BODY.length}`, 'the viewer gets the range it asked for');
  t.equal(first.headers['x-cache-status'], 'MISS');
  const second = await edge.get('/v.mp4', { range: 'bytes=5-9' });
  t.equal(second.status, 206);
  t.equal(second.body, '56789');
  t.equal(second.headers['x-cache-status'], 'HIT', 'seek served from the object the slice held whole');
  const full = await edge.get('/v.mp4');
  t.equal(full.status, 200);
  t.equal(full.body, BODY.toString());
  t.same(origin.requests.map((r) => r.headers.range), ['bytes=0-1048575'], 'one request: the first slice, no background full fetch');
});
