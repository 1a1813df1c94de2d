// The drain core (batching, retries, buffer, pause) against a local HTTP
// receiver: every record arrives once and in order, across an outage; a
// paused drain sends nothing and resumes where it stopped; a full buffer
// drops and counts; a batch the receiver refuses is dropped and counted; no
// credential reaches an error.
import pino from 'pino';
import t from 'tap';
import { syntheticRecord, type AccessRecord } from '../../../shared/src/logs/access-record.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { ECHO_FORMS, echoHeader, secretShown, startReceiver, type Receiver } from '../../../test/support/log-receivers.ts';
import { Drain, type DrainLimits } from './drain.ts';

const silent = pino({ level: 'silent' });
const limits = (over: Partial<DrainLimits> = {}): DrainLimits => ({
  bufferBytes: 1 << 20, batchMaxRecords: 10, batchMaxBytes: 1 << 20, flushIntervalMs: 50, retryBaseMs: 20, retryMaxMs: 100, ...over,
});

function httpDrain(receiver: Receiver, l: DrainLimits, extra: Record<string, unknown> = {}, status = 'active'): Drain {
  return new Drain({
    id: crypto.randomUUID(), destination_type: 'http', log_format: 'ndjson', fields: ['request_id', 'path', 'status'], status,
    destination_config: { url: `${receiver.url}/ingest`, allow_private_network: true, ...extra },
  }, l, { nodeName: 'edge-test', timeoutMs: 2_000 }, silent);
}

const record = (i: number): AccessRecord => ({ ...syntheticRecord('edge-test'), request_id: `r-${i}`, path: `/item/${i}` });

/** Every record id the receiver got, in arrival order. */
const arrived = (receiver: Receiver) => receiver.requests.flatMap((r) => r.body.toString().trim().split('\n').filter(Boolean).map((l) => JSON.parse(l).request_id as string));

t.test('batches by count and by time: every record once, in order, as ndjson', async (t) => {
  const receiver = await startReceiver(t);
  const drain = httpDrain(receiver, limits());
  t.teardown(() => drain.close());
  for (let i = 0; i < 25; i++) drain.push(record(i));
  await eventually(() => arrived(receiver).length === 25, 'arrived(receiver).length === 25');
  t.same(arrived(receiver), Array.from({ length: 25 }, (_, i) => `r-${i}`));
  t.same(receiver.requests.map((r) => r.body.toString().trim().split('\n').length), [10, 10, 5], 'two full batches, then the rest when its time is up');
  const first = receiver.requests[0]!;
  t.equal(first.headers['content-type'], 'application/x-ndjson');
  t.match(first.headers['x-batch-id'], /^[0-9a-f-]{36}$/);
  t.same(JSON.parse(first.body.toString().split('\n')[0]!), { request_id: 'r-0', path: '/item/0', status: 200 }, 'the chosen fields, in their order');
  // The receiver keeps a batch before it answers: the drain counts it once the answer is back.
  await eventually(() => drain.snapshot().batchesSent === 3, 'three batches counted');
  const s = drain.snapshot();
  t.equal(s.recordsShipped, 25);
  t.equal(s.status, 'active');
});

t.test('a receiver outage: status error with the reason, nothing lost, nothing twice once it is back', async (t) => {
  const receiver = await startReceiver(t);
  const drain = httpDrain(receiver, limits());
  t.teardown(() => drain.close());
  for (let i = 0; i < 5; i++) drain.push(record(i));
  await eventually(() => arrived(receiver).length === 5, 'arrived(receiver).length === 5');
  await receiver.down();
  for (let i = 5; i < 30; i++) drain.push(record(i));
  await eventually(() => drain.snapshot().status === 'error', 'drain.snapshot().status === error');
  t.match(drain.snapshot().lastError, /127\.0\.0\.1:\d+: ECONNREFUSED/);
  // A 503 while it comes back is a failure too.
  receiver.fail = { status: 503, body: 'warming up' };
  await receiver.up();
  await eventually(() => /answered 503 Service Unavailable/.test(drain.snapshot().lastError), 'the 503 is the last error');
  receiver.fail = null;
  await eventually(() => arrived(receiver).length === 30, 'arrived(receiver).length === 30');
  t.same(arrived(receiver), Array.from({ length: 30 }, (_, i) => `r-${i}`), 'every record once, in order');
  await eventually(() => drain.snapshot().recordsShipped === 30, 'the last batch counted');
  const s = drain.snapshot();
  t.equal(s.status, 'active', 'back to active once delivery recovers');
  t.equal(s.lastError, '');
  t.ok(s.batchesFailed >= 2);
  t.equal(s.recordsDropped, 0);
});

t.test('a paused drain sends nothing and resumes where it stopped', async (t) => {
  const receiver = await startReceiver(t);
  const drain = httpDrain(receiver, limits(), {}, 'paused');
  t.teardown(() => drain.close());
  for (let i = 0; i < 15; i++) drain.push(record(i));
  await new Promise((r) => setTimeout(r, 300));
  t.equal(receiver.requests.length, 0, 'nothing sent while paused');
  t.equal(drain.snapshot().status, 'paused');
  t.equal(drain.snapshot().bufferedRecords, 15, 'kept in the buffer');
  drain.setPaused(false);
  await eventually(() => arrived(receiver).length === 15, 'arrived(receiver).length === 15');
  t.same(arrived(receiver), Array.from({ length: 15 }, (_, i) => `r-${i}`));
  drain.setPaused(true);
  for (let i = 15; i < 20; i++) drain.push(record(i));
  await new Promise((r) => setTimeout(r, 200));
  t.equal(arrived(receiver).length, 15, 'paused again: nothing more');
  drain.update({
    id: drain.id, destination_type: 'http', log_format: 'ndjson', fields: ['request_id', 'path', 'status'], status: 'active',
    destination_config: { url: `${receiver.url}/ingest`, allow_private_network: true },
  });
  await eventually(() => arrived(receiver).length === 20, 'resumed through a new configuration');
});

t.test('a full buffer drops records and counts them (status error)', async (t) => {
  const receiver = await startReceiver(t);
  await receiver.down();
  const line = '{"request_id":"r-0","path":"/item/0","status":200}'.length;
  const drain = httpDrain(receiver, limits({ bufferBytes: (line + 1) * 10 + 5, retryMaxMs: 50 }));
  t.teardown(() => drain.close());
  for (let i = 0; i < 10; i++) drain.push(record(i));
  t.equal(drain.snapshot().recordsDropped, 0);
  for (let i = 10; i < 14; i++) drain.push(record(i));
  const s = drain.snapshot();
  t.equal(s.recordsDropped, 4, 'what does not fit is counted');
  t.equal(s.status, 'error');
  t.match(s.lastError, /buffer full .*4 records dropped/);
  await receiver.up();
  await eventually(() => arrived(receiver).length === 10, 'arrived(receiver).length === 10');
  t.same(arrived(receiver), Array.from({ length: 10 }, (_, i) => `r-${i}`), 'the records that fit arrive');
});

t.test('a batch the receiver refuses as such (400) is dropped and counted; refused credentials are retried', async (t) => {
  const receiver = await startReceiver(t);
  receiver.fail = { status: 400, body: 'bad batch' };
  const drain = httpDrain(receiver, limits());
  t.teardown(() => drain.close());
  for (let i = 0; i < 3; i++) drain.push(record(i));
  await eventually(() => drain.snapshot().recordsDropped === 3, 'drain.snapshot().recordsDropped === 3');
  t.match(drain.snapshot().lastError, /answered 400 Bad Request/);
  receiver.fail = { status: 401, body: 'unauthorized' };
  for (let i = 3; i < 6; i++) drain.push(record(i));
  await eventually(() => /answered 401/.test(drain.snapshot().lastError), '/answered 401/.test(drain.snapshot().lastError)');
  t.equal(drain.snapshot().recordsDropped, 3, 'a 401 is not the batch\'s fault: kept and retried');
  receiver.fail = null;
  await eventually(() => arrived(receiver).length === 3, 'arrived(receiver).length === 3');
  t.same(arrived(receiver), ['r-3', 'r-4', 'r-5']);
});

t.test('credentials never appear in the error a drain reports, whatever form the receiver echoes them in (across the old cut too)', async (t) => {
  const receiver = await startReceiver(t);
  const auth = 'Bearer very-secret-token-1234';
  const key = 'another-secret-5678';
  const drain = httpDrain(receiver, limits({ retryMaxMs: 50 }), { auth_header: auth, headers: { 'X-Api-Key': key } });
  t.teardown(() => drain.close());
  let n = 0;
  for (const [name, form] of Object.entries(ECHO_FORMS)) {
    for (const [header, secret] of [['authorization', auth], ['x-api-key', key]] as const) {
      const failed = drain.snapshot().batchesFailed;
      echoHeader(receiver, 403, header, form);
      drain.push(record(n++));
      await eventually(() => drain.snapshot().batchesFailed > failed, `a delivery answered (${name})`);
      const error = drain.snapshot().lastError;
      t.match(error, /answered 403 Forbidden/);
      t.same(secretShown(error, secret), [], `${header} echoed ${name}: ${error}`);
    }
  }
});

t.test('records queued while a timed batch is sent wait for their own time (a due pump kept sending a small batch per round trip)', async (t) => {
  const receiver = await startReceiver(t);
  const l = limits({ flushIntervalMs: 50 });
  const drain = httpDrain(receiver, l);
  t.teardown(() => drain.close());
  // The first batch's answer is held until the next records are queued.
  let release: (() => void) | null = null;
  receiver.handle = (got, res) => {
    release = () => {
      receiver.requests.push(got);
      res.writeHead(200).end('{}');
    };
    return true;
  };
  for (let i = 0; i < 3; i++) drain.push(record(i));
  await eventually(() => release !== null, 'the first batch (its time up) is at the receiver');
  receiver.handle = undefined;
  // The next records' time is far off: only a full batch or their interval may send them.
  l.flushIntervalMs = 60_000;
  for (let i = 3; i < 6; i++) drain.push(record(i));
  release!();
  await eventually(() => drain.snapshot().batchesSent === 1, 'the first batch delivered');
  await new Promise((r) => setTimeout(r, 300));
  t.equal(drain.snapshot().batchesSent, 1, 'the partial batch queued meanwhile was not sent before its time');
  t.equal(drain.snapshot().bufferedRecords, 3);
  await drain.flush(5_000);
  t.same(receiver.requests.map((r) => r.body.toString().trim().split('\n').length), [3, 3]);
  t.same(arrived(receiver), Array.from({ length: 6 }, (_, i) => `r-${i}`));
});

t.test('flush sends a partial batch at once (shutdown)', async (t) => {
  const receiver = await startReceiver(t);
  const drain = httpDrain(receiver, limits({ flushIntervalMs: 60_000 }));
  t.teardown(() => drain.close());
  for (let i = 0; i < 3; i++) drain.push(record(i));
  await drain.flush(5_000);
  t.same(arrived(receiver), ['r-0', 'r-1', 'r-2']);
});

t.test('lines of any length and alphabet arrive whole and in order, batches within their record and byte limits', async (t) => {
  const receiver = await startReceiver(t);
  // 4 KiB chunks: lines are written a few dozen at a time, and a line that does not fit starts the next chunk.
  const drain = httpDrain(receiver, limits({ batchMaxRecords: 50, batchMaxBytes: 4096, flushIntervalMs: 20 }));
  t.teardown(() => drain.close());
  const path = (i: number) => `/item/${i}/${'ü€😀x'.repeat(i % 23)}`;
  for (let i = 0; i < 400; i++) drain.push({ ...record(i), path: path(i) });
  await eventually(() => arrived(receiver).length === 400, 'arrived(receiver).length === 400');
  const lines = receiver.requests.flatMap((r) => r.body.toString().trim().split('\n').map((l) => JSON.parse(l) as { request_id: string; path: string }));
  t.same(lines.map((l) => l.request_id), Array.from({ length: 400 }, (_, i) => `r-${i}`), 'every record once, in order');
  t.same(lines.map((l) => l.path), Array.from({ length: 400 }, (_, i) => path(i)), 'each line whole (UTF-8)');
  t.ok(receiver.requests.every((r) => r.body.length <= 4096 && r.body.toString().trim().split('\n').length <= 50), 'no batch over its limits');
});

t.test('what a drain holds is counted in bytes as written', async (t) => {
  const receiver = await startReceiver(t);
  const drain = httpDrain(receiver, limits(), {}, 'paused');
  t.teardown(() => drain.close());
  const records = Array.from({ length: 5 }, (_, i) => ({ ...record(i), path: `/é/${i}` }));
  for (const r of records) drain.push(r);
  const expected = records.reduce((n, r) => n + Buffer.byteLength(JSON.stringify({ request_id: r.request_id, path: r.path, status: r.status })) + 1, 0);
  t.same(drain.snapshot(), { ...drain.snapshot(), bufferedRecords: 5, bufferedBytes: expected });
});
