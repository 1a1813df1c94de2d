// LabelledHistogram exposes exactly what prom-client's own Histogram exposes
// for the same observations (the two registries' text compared whole).
import t from 'tap';
import { Histogram, Registry } from 'prom-client';
import { LabelledHistogram } from './labelled-histogram.ts';

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const options = { name: 'test_ack_seconds', help: 'From a push to its acknowledgement' };

function pair() {
  const theirs = new Histogram({ ...options, labelNames: ['outcome'] as const, buckets: BUCKETS, registers: [] });
  for (const outcome of ['ok', 'failed']) theirs.zero({ outcome });
  const ours = new LabelledHistogram({ ...options, label: 'outcome', values: ['ok', 'failed'] as const, buckets: BUCKETS });
  const theirRegistry = new Registry();
  const ourRegistry = new Registry();
  theirRegistry.registerMetric(theirs);
  ourRegistry.registerMetric(ours as never);
  return { theirs, ours, text: async () => ({ theirs: await theirRegistry.metrics(), ours: await ourRegistry.metrics() }) };
}

t.test('the same exposition as prom-client\'s Histogram: at zero, and after observations on and between bounds', async (t) => {
  const { theirs, ours, text } = pair();
  let both = await text();
  t.equal(both.ours, both.theirs, 'every series at zero from the start');
  const values = [0, 0.005, 0.0051, 0.2, 1, 59.9, 60, 61, 1e6, 0.003];
  for (const [i, value] of values.entries()) {
    const outcome = i % 3 === 0 ? 'failed' : 'ok';
    theirs.observe({ outcome }, value);
    ours.observe(outcome, value);
  }
  both = await text();
  t.equal(both.ours, both.theirs);
  t.match(both.ours, 'test_ack_seconds_bucket{le="+Inf",outcome="ok"} 6');
  t.match(both.ours, 'test_ack_seconds_count{outcome="failed"} 4');
});

t.test('reset zeroes every series; an unknown label value or a non-finite number is refused', async (t) => {
  const { theirs, ours, text } = pair();
  ours.observe('ok', 3);
  ours.reset();
  theirs.reset();
  for (const outcome of ['ok', 'failed']) theirs.zero({ outcome });
  const both = await text();
  t.equal(both.ours, both.theirs);
  t.throws(() => ours.observe('other' as never, 1), /not one of its label values/);
  t.throws(() => ours.observe('ok', Number.NaN), /not a finite number/);
});
