// The agent's traffic windows (issue 24 item 4): one rollup per endpoint and
// UTC minute (a window turns at the first answer of a new minute), split by
// (origin, cache rule) slices that add up to the endpoint's counts, with
// countries (4xx and 5xx counted as errors).
import t from 'tap';
import { minuteOf, TrafficCounters } from './traffic.ts';

t.test('windows are UTC minutes; slices add up to the endpoint; countries count errors', async (t) => {
  const realNow = Date.now;
  t.teardown(() => { Date.now = realNow; });
  const base = Date.UTC(2026, 10, 27, 10, 0, 30);
  Date.now = () => base;
  const c = new TrafficCounters();
  c.record('ep', 200, 'HIT', 100, true, 1, '/a', 'rule', null, 'origin', 'FR');
  c.record('ep', 404, 'MISS', 10, false, 30, '/b', null, null, 'origin', 'FR');
  c.record('ep', 200, 'BYPASS', 5, false, 3, '/c', null, null, null, null);
  Date.now = () => base + 45_000; // 10:01:15: a new minute
  c.record('ep', 503, 'MISS', 0, false, 700, '/a', 'rule', null, 'origin', 'DE');
  const rollups = c.takeRollups();
  t.same(rollups.map((r) => [new Date(r.minuteStartMs).toISOString(), r.requests]), [['2026-11-27T10:00:00.000Z', 3], ['2026-11-27T10:01:00.000Z', 1]]);
  const [first, second] = rollups;
  t.same(first!.slices.map((s) => [s.originId, s.cacheRuleId, s.requests]).sort(), [['', '', 1], ['origin', '', 1], ['origin', 'rule', 1]]);
  t.equal(first!.slices.reduce((n, s) => n + s.requests, 0), first!.requests, 'every answer in exactly one slice');
  t.same(first!.countries, [{ countryCode: 'FR', requests: 2, bytes: 110, errors: 1 }]);
  t.same(second!.countries, [{ countryCode: 'DE', requests: 1, bytes: 0, errors: 1 }]);
  t.equal(second!.slices[0]!.statusClasses['5xx'], 1);
  t.same(c.takeRollups(), [], 'taken once');
  t.equal(minuteOf(base), Date.UTC(2026, 10, 27, 10, 0));
});
