// The rollup store on the embedded PGlite (npm start's database): range
// partitions made at run time, the set-based upserts, date_bin series, the
// roll-ups and retention run there as on PostgreSQL.
import t from 'tap';
import { RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, embedded: true });

t.test('ingest, read, roll up and retain on PGlite', async (t) => {
  const store = cp.app.trafficRollups!;
  const em = cp.app.db.orm.em.fork();
  const now = new Date();
  const minute = now.getTime() - (now.getTime() % 60_000);
  const endpoint = crypto.randomUUID();
  const statuses = { hit: 3, miss: 1, expired: 0, stale: 0, bypass: 0, revalidated: 0, updating: 0 };
  const report = {
    report_id: crypto.randomUUID(), node_id: crypto.randomUUID(),
    rollups: [{
      minute, endpoint_id: endpoint,
      slices: [{ origin_id: '', cache_rule_id: '', requests: 4, s2xx: 4, s3xx: 0, s4xx: 0, s5xx: 0, statuses, bytes_from_cache: 300, bytes_from_origin: 100, rt: [4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], rt_sum_ms: 2 }],
      urls: [{ url: '/x', requests: 4, bytes: 400, cache_hits: 3, statuses }],
      countries: [{ country: 'FR', requests: 4, bytes: 400, errors: 0 }],
    }],
  };
  const first = await store.ingest(em, [report], now);
  t.same(first, { confirmed: [report.report_id], fresh: 1, rollups: 1 });
  t.same(await store.ingest(em, [report], now), { confirmed: [report.report_id], fresh: 0, rollups: 0 }, 'a copy adds nothing');
  const range = { from: minute - 3_600_000 + 60_000, to: minute + 60_000 };
  const totals = await store.totals(em, range, { kind: 'endpoint', id: endpoint });
  t.equal(totals.requests, 4);
  t.equal((await store.totals(em, range, { kind: 'platform' })).bytes_from_cache, 300);
  t.same((await store.series(em, range, 300_000, { kind: 'platform' })).map((p) => p.bytes_from_cache + p.bytes_from_origin), [400]);
  t.same((await store.topUrls(em, range, endpoint, 'requests', 10)).map((u) => [u.url, u.requests]), [['/x', 4]]);
  t.same((await store.countries(em, range, null)).map((c) => [c.country, c.requests]), [['FR', 4]]);
  const rolled = await store.rollUp(em, now);
  t.ok(rolled.hours >= 1);
  t.equal((await store.totals(em, range, { kind: 'endpoint', id: endpoint })).requests, 4, 'the same after the roll-up');
  const retained = await store.retain(em, new Date(now.getTime() + 10 * 86_400_000));
  t.ok(retained.dropped.length > 0 && retained.receipts === 1);
  t.equal((await store.totals(em, range, { kind: 'platform' })).requests, 0, 'gone with its partitions');
});
