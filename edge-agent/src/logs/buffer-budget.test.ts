// Drains of a worker share one buffer budget (LOG_DRAIN_BUFFER_BYTES), against
// local receivers: drains whose destinations are down or never answer hold no
// more than the budget together, whatever they are sent, and count what they
// drop; a drain that delivers keeps delivering every record (it takes room
// from the drain holding the most); closed drains give every byte back.
import pino from 'pino';
import t from 'tap';
import { syntheticRecord, type AccessRecord } from '../../../shared/src/logs/access-record.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { startReceiver, type Receiver } from '../../../test/support/log-receivers.ts';
import { BufferBudget } from './buffer-budget.ts';
import { Drain, type DrainLimits } from './drain.ts';

const silent = pino({ level: 'silent' });
const limits: DrainLimits = { bufferBytes: 0, batchMaxRecords: 10, batchMaxBytes: 1 << 20, flushIntervalMs: 50, retryBaseMs: 20, retryMaxMs: 100 };
const record = (i: number): AccessRecord => ({ ...syntheticRecord('edge-test'), request_id: `r-${i}`, path: `/item/${i}` });

function drainTo(receiver: Receiver, budget: BufferBudget): Drain {
  return new Drain({
    id: crypto.randomUUID(), destination_type: 'http', log_format: 'ndjson', fields: ['request_id', 'path', 'status'], status: 'active',
    destination_config: { url: `${receiver.url}/ingest`, allow_private_network: true },
  }, limits, { nodeName: 'edge-test', timeoutMs: 2_000 }, silent, {}, budget);
}

const arrived = (receiver: Receiver) => receiver.requests.flatMap((r) => r.body.toString().trim().split('\n').filter(Boolean).map((l) => JSON.parse(l).request_id as string));

t.test('drains with their destinations down or slow hold no more than the one budget together; a delivering drain keeps delivering; closed drains give it all back', async (t) => {
  const budget = new BufferBudget(64 * 1024);
  const down = await startReceiver(t);
  await down.down();
  const slow = await startReceiver(t);
  slow.handle = () => true; // never answers (the send waits for its 2 s timeout)
  const stuck = [...Array.from({ length: 3 }, () => drainTo(down, budget)), ...Array.from({ length: 2 }, () => drainTo(slow, budget))];
  t.teardown(() => { for (const d of stuck) d.close(); });
  const sent = 3_000;
  for (let i = 0; i < sent; i++) {
    for (const d of stuck) d.push(record(i));
    if (i % 500 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  const held = () => stuck.reduce((sum, d) => sum + d.heldBytes, 0);
  t.ok(budget.heldBytes <= budget.bytes, `the budget holds ${budget.heldBytes} of ${budget.bytes} bytes`);
  t.ok(held() <= budget.heldBytes, 'the drains hold it between them');
  t.ok(stuck.reduce((sum, d) => sum + d.snapshot().bufferedBytes, 0) <= budget.bytes, 'their records fit in it');
  for (const d of stuck) {
    const s = d.snapshot();
    t.equal(s.bufferedRecords + s.recordsDropped, sent, 'every record is held or counted dropped');
    t.ok(s.recordsDropped > 0, `dropped and counted (${s.recordsDropped})`);
    t.match(s.lastError, /^buffer full \(65536 bytes shared by 5 drains\): \d+ records dropped$/);
    t.equal(s.status, 'error');
  }

  // A drain whose destination answers joins: it takes room from the drain holding the most, and loses nothing.
  const up = await startReceiver(t);
  const healthy = drainTo(up, budget);
  t.teardown(() => healthy.close());
  const dropsBefore = stuck.reduce((sum, d) => sum + d.snapshot().recordsDropped, 0);
  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < 10; i++) {
      healthy.push(record(round * 10 + i));
      for (const d of stuck) d.push(record(sent + round * 10 + i));
    }
    await eventually(() => healthy.snapshot().recordsShipped === (round + 1) * 10, `round ${round} delivered`);
    t.ok(budget.heldBytes <= budget.bytes, 'still within the budget');
  }
  t.same(arrived(up), Array.from({ length: 200 }, (_, i) => `r-${i}`), 'every record of the delivering drain, in order');
  t.equal(healthy.snapshot().recordsDropped, 0, 'none of them dropped');
  t.ok(stuck.reduce((sum, d) => sum + d.snapshot().recordsDropped, 0) > dropsBefore, 'the stuck drains dropped more instead');

  // Closed, the drains give every byte back (a batch still being sent when its send ends).
  for (const d of [...stuck, healthy]) d.close();
  t.equal(budget.drains, 0);
  await eventually(() => budget.heldBytes === 0, 'every byte given back');
});
