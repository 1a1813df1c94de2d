// Large objects kept in slices (proxy/slices.ts): a real agent with slices of
// 256 KiB in front of a real origin that answers single byte ranges as
// RFC 9110 §14 says, counting every body byte it sends. Seeks cost the origin
// only the slices that hold them, and nothing when repeated; a full request
// is one origin answer kept slice by slice; a changed validator drops every
// slice of the old version; a stale head is revalidated by one conditional
// request; purges take the slices with the head; an origin that ignores Range
// still works.
import t, { type Test } from 'tap';
import { request } from 'undici';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HOST, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const SLICE = 256 * 1024;
const SIZE = 3 * 1024 * 1024 + 12345; // above the object limit below: never kept whole

/** Version v of the object: every byte depends on its offset and the version. */
function content(v: number, size = SIZE): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) b[i] = (i * 7 + (i >> 11) + v * 101) & 255;
  return b;
}

interface RangeOrigin {
  port: number;
  bytes: () => number;
  requests: { method: string; url: string; headers: IncomingMessage['headers'] }[];
  /** Serve version v from now on (another ETag and other bytes). */
  change: (v: number) => void;
  close: () => Promise<void>;
}

async function rangeOrigin(options: { ignoresRange?: boolean; cacheControl?: string; etag?: boolean; lastModified?: boolean } = {}): Promise<RangeOrigin> {
  let version = 1;
  let body = content(version);
  let sent = 0;
  const etag = () => `"v${version}"`;
  const origin = await startOrigin((req: IncomingMessage, res: ServerResponse) => {
    const head: Record<string, string> = { 'cache-control': options.cacheControl ?? 'max-age=300', 'content-type': 'video/mp4' };
    if (options.lastModified !== false) head['last-modified'] = new Date(Date.UTC(2026, 0, version)).toUTCString();
    if (options.etag !== false) head.etag = etag();
    if (req.headers['if-none-match'] === etag()) {
      res.writeHead(304, head);
      return res.end();
    }
    const m = options.ignoresRange ? null : /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
    let first = 0;
    let last = body.length - 1;
    let status = 200;
    if (m !== null) {
      first = m[1] === '' ? Math.max(0, body.length - Number(m[2])) : Number(m[1]);
      last = m[1] === '' || m[2] === '' ? body.length - 1 : Math.min(Number(m[2]), body.length - 1);
      if (first >= body.length) {
        res.writeHead(416, { 'content-range': `bytes */${body.length}` });
        return res.end();
      }
      status = 206;
      head['content-range'] = `bytes ${first}-${last}/${body.length}`;
    }
    head['content-length'] = String(last - first + 1);
    res.writeHead(status, head);
    if (req.method === 'HEAD') return res.end();
    const part = body.subarray(first, last + 1);
    res.end(part, () => { sent += part.length; });
  });
  return {
    port: origin.port,
    bytes: () => sent,
    requests: origin.requests,
    change: (v) => { version = v; body = content(v); },
    close: origin.close,
  };
}

async function setUp(t: Test, origin: RangeOrigin) {
  const edge = await startAgent(snapshotFor(origin.port), { sliceBytes: SLICE, sliceThresholdBytes: 1024 * 1024, maxObjectBytes: 2 * 1024 * 1024 });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const get = async (path: string, headers: Record<string, string> = {}, method = 'GET') => {
    const res = await request(`http://127.0.0.1:${edge.port}${path}`, { method: method as 'GET', headers: { host: HOST, ...headers } });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: res.headers as Record<string, string>, body };
  };
  return { edge, get };
}

t.test('seeks in a large object cost the origin only the slices that hold them, and nothing when repeated', async (t) => {
  const origin = await rangeOrigin();
  const { edge, get } = await setUp(t, origin);
  const v1 = content(1);
  const seeks: [number, number][] = [[0, 99_999], [1_000_000, 1_099_999], [2_500_000, 2_600_000], [SIZE - 50_000, SIZE - 1], [700_000, 720_000]];
  for (const [a, b] of seeks) {
    const r = await get('/movie.mp4', { range: `bytes=${a}-${b}` });
    t.equal(r.status, 206, `bytes ${a}-${b}`);
    t.equal(r.headers['content-range'], `bytes ${a}-${b}/${SIZE}`);
    t.ok(r.body.equals(v1.subarray(a, b + 1)), `the bytes of ${a}-${b}`);
  }
  const slices = new Set(seeks.flatMap(([a, b]) => [Math.floor(a / SLICE), Math.floor(b / SLICE)]));
  const covered = [...slices].reduce((n, s) => n + Math.min(SLICE, SIZE - s * SLICE), 0);
  t.equal(origin.bytes(), covered, 'the origin sent exactly the slices the seeks fall in');
  t.ok(origin.requests.every((r) => /^bytes=\d+-\d+$/.test(r.headers.range ?? '')), 'only slice requests, no background full fetch');
  const before = origin.bytes();
  const requests = origin.requests.length;
  for (const [a, b] of seeks) {
    const r = await get('/movie.mp4', { range: `bytes=${a}-${b}` });
    t.equal(r.headers['x-cache-status'], 'HIT', `a repeated seek to ${a} is a hit`);
    t.ok(r.body.equals(v1.subarray(a, b + 1)));
  }
  t.equal(origin.bytes(), before, 'repeated seeks cost the origin nothing');
  t.equal(origin.requests.length, requests);
  t.equal(edge.agent.proxy.sliceFills, slices.size, 'each slice fetched once');
  t.match(await edge.agent.metrics.registry.metrics(), new RegExp(`^edge_cache_slice_fills_total ${slices.size}$`, 'm'), 'and counted on /metrics');
});

t.test('a full request of a large object is one origin answer, kept slice by slice: later full and range requests are hits', async (t) => {
  const origin = await rangeOrigin();
  const { get } = await setUp(t, origin);
  const v1 = content(1);
  const full = await get('/whole.mp4');
  t.equal(full.status, 200);
  t.equal(full.headers['content-length'], String(SIZE));
  t.ok(full.body.equals(v1), 'the whole object');
  t.equal(origin.requests.length, 1);
  t.equal(origin.requests[0].headers.range, undefined, 'one plain GET');
  t.equal(origin.bytes(), SIZE, 'each byte fetched once');
  const again = await get('/whole.mp4');
  t.equal(again.headers['x-cache-status'], 'HIT');
  t.ok(again.body.equals(v1));
  const seek = await get('/whole.mp4', { range: 'bytes=2000000-2000099' });
  t.equal(seek.status, 206);
  t.equal(seek.headers['x-cache-status'], 'HIT');
  t.ok(seek.body.equals(v1.subarray(2_000_000, 2_000_100)));
  const suffix = await get('/whole.mp4', { range: 'bytes=-10' });
  t.ok(suffix.body.equals(v1.subarray(SIZE - 10)));
  const head = await get('/whole.mp4', {}, 'HEAD');
  t.equal(head.status, 200);
  t.equal(head.headers['content-length'], String(SIZE));
  t.equal(head.headers.etag, '"v1"');
  const beyond = await get('/whole.mp4', { range: `bytes=${SIZE}-` });
  t.equal(beyond.status, 416);
  t.equal(beyond.headers['content-range'], `bytes */${SIZE}`);
  const conditional = await get('/whole.mp4', { 'if-none-match': '"v1"' });
  t.equal(conditional.status, 304);
  t.equal(origin.requests.length, 1, 'all of it from the slices');
  t.equal(origin.bytes(), SIZE);
});

t.test('a suffix range of an unknown large object: the first slice tells the length, then the last slices are fetched', async (t) => {
  const origin = await rangeOrigin();
  const { get } = await setUp(t, origin);
  const r = await get('/tail.mp4', { range: 'bytes=-300000' });
  t.equal(r.status, 206);
  t.equal(r.headers['content-range'], `bytes ${SIZE - 300_000}-${SIZE - 1}/${SIZE}`);
  t.ok(r.body.equals(content(1).subarray(SIZE - 300_000)));
});

t.test('a changed validator drops every slice of the old version: the versions never mix', async (t) => {
  const origin = await rangeOrigin();
  const { get } = await setUp(t, origin);
  const first = await get('/news.mp4', { range: 'bytes=0-999' });
  t.ok(first.body.equals(content(1).subarray(0, 1000)), 'version 1');
  origin.change(2);
  // Slice 8 is not kept: its answer comes with the new ETag.
  const later = await get('/news.mp4', { range: 'bytes=2100000-2100999' });
  t.equal(later.status, 206);
  t.ok(later.body.equals(content(2).subarray(2_100_000, 2_101_000)), 'the new version\'s bytes');
  t.equal(later.headers.etag, '"v2"', 'with the new version\'s head');
  const back = await get('/news.mp4', { range: 'bytes=0-999' });
  t.ok(back.body.equals(content(2).subarray(0, 1000)), 'slice 0 of the old version is gone: fetched again, of the new one');
  t.equal(back.headers.etag, '"v2"');
  const whole = await get('/news.mp4');
  t.ok(whole.body.equals(content(2)), 'the whole object is the new version throughout');
});

t.test('a full answer cut short by a version change mid-stream is cut, never mixed', async (t) => {
  const origin = await rangeOrigin();
  const { get } = await setUp(t, origin);
  await get('/mid.mp4', { range: 'bytes=0-9' }); // head and slice 0 of version 1
  origin.change(2);
  // Slice 0 is kept (version 1); slice 1 comes with version 2's ETag: the answer cannot go on.
  await t.rejects(get('/mid.mp4'), 'the viewer\'s answer is cut (its length was not reached)');
  const after = await get('/mid.mp4');
  t.ok(after.body.equals(content(2)), 'the next request gets version 2 whole');
});

t.test('a stale head is revalidated with one conditional request for a slice: a 304 keeps every slice', async (t) => {
  const origin = await rangeOrigin({ cacheControl: 'max-age=0, must-revalidate' });
  const { get } = await setUp(t, origin);
  await get('/live.mp4', { range: 'bytes=0-999' });
  const bytes = origin.bytes();
  const r = await get('/live.mp4', { range: 'bytes=100-199' });
  t.equal(r.status, 206);
  t.ok(r.body.equals(content(1).subarray(100, 200)));
  t.equal(r.headers['x-cache-status'], 'REVALIDATED');
  const last = origin.requests[origin.requests.length - 1];
  t.equal(last.headers['if-none-match'], '"v1"', 'conditional');
  t.equal(last.headers.range, `bytes=0-${SLICE - 1}`, 'for the slice the viewer needs');
  t.equal(origin.bytes(), bytes, 'a 304: no body bytes');
});

t.test('a path purge takes the head and every slice with it', async (t) => {
  const origin = await rangeOrigin();
  const { edge, get } = await setUp(t, origin);
  await get('/p.mp4');
  t.equal((await get('/p.mp4', { range: 'bytes=5-9' })).headers['x-cache-status'], 'HIT');
  edge.agent.applyPurge({ sequence: 1, purge_id: 'p1', endpoint_id: 'ep1', type: 'path', paths: ['/p.mp4'] });
  origin.change(3);
  const r = await get('/p.mp4', { range: `bytes=${SLICE * 5}-${SLICE * 5 + 9}` });
  t.equal(r.headers['x-cache-status'], 'MISS');
  t.ok(r.body.equals(content(3).subarray(SLICE * 5, SLICE * 5 + 10)), 'fetched again after the purge');
});

t.test('Last-Modified alone tells the versions apart: a changed one is a new version', async (t) => {
  const origin = await rangeOrigin({ etag: false });
  const { get } = await setUp(t, origin);
  const a = await get('/lm.mp4', { range: 'bytes=0-9' });
  t.equal(a.status, 206);
  origin.change(2);
  const b = await get('/lm.mp4', { range: `bytes=${SLICE * 4}-${SLICE * 4 + 9}` });
  t.ok(b.body.equals(content(2).subarray(SLICE * 4, SLICE * 4 + 10)));
  const c = await get('/lm.mp4', { range: 'bytes=0-9' });
  t.ok(c.body.equals(content(2).subarray(0, 10)), 'slice 0 of the old version is gone');
});

t.test('an object without a validator is never kept in slices: each range miss gets the origin\'s answer to the viewer\'s range', async (t) => {
  const origin = await rangeOrigin({ etag: false, lastModified: false });
  const { get } = await setUp(t, origin);
  for (let i = 0; i < 2; i++) {
    const r = await get('/bare.mp4', { range: 'bytes=1000-1099' });
    t.equal(r.status, 206);
    t.ok(r.body.equals(content(1).subarray(1000, 1100)));
    t.equal(r.headers['x-cache-status'], 'MISS', 'not kept');
  }
  t.ok(origin.requests.some((r) => r.headers.range === 'bytes=1000-1099'), 'the viewer\'s own range went to the origin');
});

t.test('an origin that ignores Range still works: a large object streams through, uncached, as without slices', async (t) => {
  const origin = await rangeOrigin({ ignoresRange: true });
  const { get } = await setUp(t, origin);
  const r = await get('/any.mp4', { range: 'bytes=10-19' });
  t.equal(r.status, 200, 'the origin\'s whole answer');
  t.ok(r.body.equals(content(1)));
  const again = await get('/any.mp4', { range: 'bytes=10-19' });
  t.ok(again.body.equals(content(1)));
  t.equal(origin.requests.length, 2, 'nothing kept (above the object limit)');
});
