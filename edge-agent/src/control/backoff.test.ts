import t from 'tap';
import { Backoff, backoffCeiling, backoffDelay, DEFAULT_BACKOFF } from './backoff.ts';

t.test('the ceiling doubles from the base up to the cap', async (t) => {
  t.same([0, 1, 2, 3, 4].map((a) => backoffCeiling(a)), [250, 500, 1000, 2000, 4000]);
  t.equal(backoffCeiling(6), 16_000);
  t.equal(backoffCeiling(7), 30_000, 'capped (32,000 would pass it)');
  t.equal(backoffCeiling(5000), 30_000, 'no overflow for a very long outage');
  t.equal(backoffCeiling(-3), 250);
  t.same(DEFAULT_BACKOFF, { baseMs: 250, capMs: 30_000 });
});

t.test('full jitter: uniform between 0 and the ceiling', async (t) => {
  t.equal(backoffDelay(3, DEFAULT_BACKOFF, () => 0), 0);
  t.equal(backoffDelay(3, DEFAULT_BACKOFF, () => 0.5), 1000);
  t.equal(backoffDelay(3, DEFAULT_BACKOFF, () => 0.999999), 1999);
  t.equal(backoffDelay(40, { baseMs: 100, capMs: 1000 }, () => 0.999999), 999);
  for (let a = 0; a < 50; a++) {
    const d = backoffDelay(a);
    t.ok(d >= 0 && d < backoffCeiling(a), `attempt ${a}: ${d} within [0, ${backoffCeiling(a)})`);
  }
});

t.test('Backoff counts failures, resets, and waits the cap when told to', async (t) => {
  const b = new Backoff({ baseMs: 10, capMs: 100 }, () => 0.5);
  t.same([b.next(), b.next(), b.next(), b.next(), b.next(), b.next()], [5, 10, 20, 40, 50, 50]);
  t.equal(b.attempts, 6);
  b.reset();
  t.equal(b.attempts, 0);
  t.equal(b.next(), 5, 'starts over after a reset');
  t.equal(b.atCap(), 100);
});
