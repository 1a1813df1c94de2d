// A 206 from the origin is passed through unchanged to the viewer that asked
// for the range and is never stored as if it were the full object.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('an origin 206 is passed through untouched and never stored as the full object', async (t) => {
  // This origin always answers with the first five bytes as a 206, even to a request without Range.
  const origin = await startOrigin((_req, res) => {
    res.writeHead(206, { 'content-type': 'video/mp4', 'cache-control': 'max-age=600', 'content-range': 'bytes 0-4/1000', 'content-length': '5', etag: '"v1"', 'x-origin': 'yes' });
    res.end('01234');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const ranged = await edge.get('/movie.mp4', { range: 'bytes=0-4' });
  t.equal(ranged.status, 206);
  t.equal(ranged.body, '01234');
  t.equal(ranged.headers['content-range'], 'bytes 0-4/1000');
  t.equal(ranged.headers['content-length'], '5');
  t.equal(ranged.headers.etag, '"v1"');
  t.equal(ranged.headers['x-origin'], 'yes');
  t.equal(ranged.headers['x-cache-status'], 'MISS');
  await edge.agent.proxy.settled(); // the background fill has finished
  t.equal(edge.agent.store.objectCount, 0, 'nothing stored');
  const full = await edge.get('/movie.mp4');
  t.equal(full.status, 206, 'a request without Range is not answered from a stored partial');
  t.equal(full.headers['x-cache-status'], 'MISS');
  const again = await edge.get('/movie.mp4', { range: 'bytes=0-4' });
  t.equal(again.headers['x-cache-status'], 'MISS', 'the range is fetched again, not served from cache');
  t.equal(edge.agent.store.objectCount, 0);
  t.ok(origin.count('/movie.mp4') >= 3, 'every request went to the origin');
});
