// Traffic analytics through the real server (issue 24 item 4; document 3
// §4.13): two simulated agents report known minutes over the control channel;
// every metrics route reads the same totals back (merged per endpoint, origin
// and cache rule, p95/p99 from the merged histograms, top URLs, countries and
// continents); a report sent again (after a reconnect) counts once and is
// confirmed again; the roll-ups to hours and days change no figure; bad
// input is 400 and unknown filters 404; rows grow with endpoints, not nodes.
import { randomUUID } from 'node:crypto';
import type { MessageInitShape } from '@bufbuild/protobuf';
import t from 'tap';
import type { TrafficReportSchema } from '../../../shared/gen/edge/v1/control_pb.ts';
import { RESPONSE_TIME_BUCKETS_MS } from '../../../shared/src/metrics/buckets.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { TestConfigSource, agentConnector, testTokens, type TestAgent } from '../../../test/support/edge-channel.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { histogramQuantile } from './metrics-service.ts';
import { planRange } from './postgres-rollups.ts';

const cp = await startTestControlPlane(t, {
  env: RELAXED_LIMITS,
  services: { edgeConfig: new TestConfigSource(), edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
});
await cp.app.edgeChannel!.hub.subscribed;
const { admin, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const { connect } = agentConnector(t, cp.app.edgeChannel!.port, 'agt_good');

const minute = Math.floor(Date.now() / 60_000) * 60_000;
const buckets = (counts: Record<number, number>) => Array.from({ length: RESPONSE_TIME_BUCKETS_MS.length + 1 }, (_, i) => BigInt(counts[i] ?? 0));

t.test('histogram quantiles interpolate within their bucket', async (t) => {
  t.equal(histogramQuantile([0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.5), 17.5, '10 answers in (10, 25]: the median halfway');
  t.equal(histogramQuantile([90, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0], 0.95), 175, 'p95 halfway into (100, 250]');
  t.equal(histogramQuantile([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3], 0.99), 10_000, 'beyond the last bound: the last bound');
  t.equal(histogramQuantile(new Array(14).fill(0), 0.95), 0);
});

t.test('planRange: whole days, whole hours, minutes, finer where dirty', async (t) => {
  const day = Date.UTC(2026, 10, 20);
  const plan = planRange({ from: day - 30 * 60_000, to: day + 26 * 3_600_000 + 5 * 60_000 }, new Set([day + 25 * 3_600_000]), new Set());
  t.same(plan.map((p) => [p.table, (p.from - day) / 60_000, (p.to - day) / 60_000]), [
    ['minute', -30, 0], ['day', 0, 1440], ['hour', 1440, 1500], ['minute', 1500, 1565],
  ]);
  t.same(planRange({ from: day, to: day + 86_400_000 }, new Set(), new Set([day])).map((p) => p.table), ['hour'], 'a dirty day is read from its hours');
});

t.test('two agents\' minutes read back the same from every metrics route; a replayed report counts once', async (t) => {
  const { endpoint: ep } = await makeEndpoint(cp, admin);
  const ruleRes = await send(admin, 'POST', '/v1/cdn/cache-rules', { name: 'all', distribution_id: ep.id, match: { paths: ['/*'] }, ttl_seconds: 60, priority: 1 });
  t.equal(ruleRes.status, 201, ruleRes.text);
  const rule = ruleRes.body as { id: string };
  const originId = ep.default_origin_id as string;
  const { agent: a } = await connect({ hostname: 'edge-a' });
  const { agent: b } = await connect({ hostname: 'edge-b' });
  const reportId = randomUUID();
  type Report = MessageInitShape<typeof TrafficReportSchema>;
  const reportA: Report = {
    reportId,
    rollups: [{
      minuteStartMs: BigInt(minute), endpointId: ep.id,
      slices: [
        { originId, cacheRuleId: rule.id, requests: 10n, status2xx: 9n, status4xx: 1n, cacheStatuses: { HIT: 6n, MISS: 4n }, bytesFromCache: 6000n, bytesFromOrigin: 4000n, responseTimeBuckets: buckets({ 1: 6, 6: 4 }), responseTimeSumMs: 200 },
        { originId: '', cacheRuleId: '', requests: 2n, status4xx: 2n, cacheStatuses: { BYPASS: 2n }, responseTimeBuckets: buckets({ 0: 2 }), responseTimeSumMs: 1 },
      ],
      topUrls: [
        { url: '/a.js', requests: 7n, bytes: 7000n, cacheHits: 5n, cacheStatuses: { HIT: 5n, MISS: 2n } },
        { url: '/b.css', requests: 3n, bytes: 3000n, cacheHits: 1n, cacheStatuses: { HIT: 1n, MISS: 2n } },
      ],
      countries: [{ countryCode: 'FR', requests: 8n, bytes: 8000n, errors: 1n }, { countryCode: 'US', requests: 2n, bytes: 2000n, errors: 0n }],
    }],
  };
  const reportB: Report = {
    reportId: randomUUID(),
    rollups: [{
      minuteStartMs: BigInt(minute), endpointId: ep.id,
      slices: [{ originId, cacheRuleId: rule.id, requests: 8n, status2xx: 6n, status5xx: 2n, cacheStatuses: { HIT: 4n, STALE: 1n, EXPIRED: 3n }, bytesFromCache: 5000n, bytesFromOrigin: 3000n, responseTimeBuckets: buckets({ 1: 4, 8: 4 }), responseTimeSumMs: 1000 }],
      topUrls: [{ url: '/a.js', requests: 8n, bytes: 8000n, cacheHits: 5n, cacheStatuses: { HIT: 4n, STALE: 1n, EXPIRED: 3n } }],
      countries: [{ countryCode: 'DE', requests: 8n, bytes: 8000n, errors: 2n }],
    }],
  };
  a.send({ case: 'trafficReport', value: reportA });
  b.send({ case: 'trafficReport', value: reportB });
  const receipts = (agent: TestAgent) => agent.received.flatMap((m) => (m.message.case === 'trafficReceipt' ? m.message.value.reportIds : []));
  await cp.app.edgeChannel!.hub.flush();
  await eventually(() => receipts(a).includes(reportId) && receipts(b).includes(reportB.reportId!), 'both reports confirmed');
  // A reconnect: the same report again, on a new stream.
  a.close();
  const { agent: a2 } = await connect({ hostname: 'edge-a', nodeId: a.nodeId });
  a2.send({ case: 'trafficReport', value: reportA });
  await cp.app.edgeChannel!.hub.flush();
  await eventually(() => receipts(a2).includes(reportId), 'the replay confirmed again');

  const traffic = (await send(viewer, 'GET', '/v1/cdn/metrics/traffic?period=last_1h')).body;
  t.same(traffic, {
    period: 'last_1h', total_requests: 20, cache_hit_rate: 0.6111, error_rate: 0.25, avg_response_time_ms: 60.05,
    p95_response_time_ms: histogramQuantile([2, 10, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 0, 0], 0.95),
    p99_response_time_ms: histogramQuantile([2, 10, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 0, 0], 0.99),
    bytes_served: 18000, by_status_class: { '2xx': 15, '3xx': 0, '4xx': 3, '5xx': 2 },
  }, 'the replay added nothing; hit rate (6+4+1)/(20-2), errors (3+2)/20');
  t.equal(traffic.p95_response_time_ms, 437.5, 'p95 from the merged histograms: 19th of 20 in (250, 500]');
  const byOrigin = (await send(viewer, 'GET', `/v1/cdn/metrics/traffic?period=last_1h&origin_id=${originId}`)).body;
  t.equal(byOrigin.total_requests, 18, 'origin filter: the slices of that origin');
  t.same((await send(viewer, 'GET', `/v1/cdn/metrics/cache?period=last_24h&cache_rule_id=${rule.id}`)).body, {
    period: 'last_24h', hit_count: 10, miss_count: 7, bypass_count: 0, revalidate_count: 0, stale_count: 1, hit_rate: 0.6111, bytes_from_cache: 11000, bytes_from_origin: 7000,
  });
  const cache = (await send(viewer, 'GET', '/v1/cdn/metrics/cache?period=last_1h')).body;
  t.equal(cache.bypass_count, 2);
  const bw = (await send(viewer, 'GET', `/v1/cdn/metrics/bandwidth?period=last_1h&endpoint_id=${ep.id}`)).body;
  t.equal(bw.granularity, '1m');
  t.equal(bw.timeseries.length, 60);
  t.equal(bw.total_bytes_transferred, 18000);
  t.equal(bw.total_bytes_from_cache, 11000);
  t.equal(bw.cache_bandwidth_ratio, 0.6111);
  t.same(bw.timeseries.at(-1), { timestamp: new Date(minute).toISOString(), bytes_transferred: 18000, bytes_from_cache: 11000 });
  const top = (await send(viewer, 'GET', `/v1/cdn/metrics/top-urls?period=last_1h&endpoint_id=${ep.id}`)).body;
  t.same(top.items, [
    { url: `https://${ep.hostname}/a.js`, request_count: 15, bytes_transferred: 15000, cache_hit_rate: 0.6667, cache_status_breakdown: { HIT: 9, MISS: 2, EXPIRED: 3, STALE: 1 } },
    { url: `https://${ep.hostname}/b.css`, request_count: 3, bytes_transferred: 3000, cache_hit_rate: 0.3333, cache_status_breakdown: { HIT: 1, MISS: 2 } },
  ]);
  t.same((await send(viewer, 'GET', '/v1/cdn/metrics/top-urls?period=last_1h&ranked_by=bytes_transferred&limit=1')).body.items.map((i: { url: string }) => i.url), [`https://${ep.hostname}/a.js`]);
  const geo = (await send(viewer, 'GET', '/v1/cdn/metrics/geography?period=last_30d')).body;
  t.same(geo.by_country, [
    { country_code: 'DE', country_name: 'Germany', request_count: 8, bytes_transferred: 8000, error_rate: 0.25 },
    { country_code: 'FR', country_name: 'France', request_count: 8, bytes_transferred: 8000, error_rate: 0.125 },
    { country_code: 'US', country_name: 'United States', request_count: 2, bytes_transferred: 2000, error_rate: 0 },
  ]);
  t.same(geo.by_continent, [
    { continent_code: 'EU', continent_name: 'Europe', request_count: 16, bytes_transferred: 16000 },
    { continent_code: 'NA', continent_name: 'North America', request_count: 2, bytes_transferred: 2000 },
  ]);

  const rows = await query<{ n: string }>(cp, `select count(*)::int as n from cdn_traffic_minute where endpoint_id = ?`, [ep.id]);
  t.equal(Number(rows[0]!.n), 2, 'one row per slice of the minute, whatever the number of nodes');

  // Rolled up to hours and days: the same figures, from the coarser rows.
  const before = { traffic: (await send(viewer, 'GET', '/v1/cdn/metrics/traffic?period=last_7d')).body, bw: (await send(viewer, 'GET', '/v1/cdn/metrics/bandwidth?period=last_30d&granularity=1d')).body };
  const done = await cp.app.trafficRollups!.rollUp(cp.app.db.orm.em.fork(), new Date());
  t.ok(done.hours >= 1, 'an hour rolled up');
  const after = { traffic: (await send(viewer, 'GET', '/v1/cdn/metrics/traffic?period=last_7d')).body, bw: (await send(viewer, 'GET', '/v1/cdn/metrics/bandwidth?period=last_30d&granularity=1d')).body };
  t.same(after, before, 'rolled up or not, the same answer');
  t.equal(after.traffic.total_requests, 20);
  t.equal(after.bw.total_bytes_transferred, 18000);
  t.equal((await query(cp, 'select 1 from cdn_traffic_hour where endpoint_id = ?', [ep.id])).length, 2, 'the hour rows');
});

t.test('bad input is 400, unknown filters 404, roles', async (t) => {
  for (const path of [
    '/v1/cdn/metrics/traffic', '/v1/cdn/metrics/traffic?period=last_30d', '/v1/cdn/metrics/traffic?period=last_1h&origin_id=nope',
    '/v1/cdn/metrics/cache?period=last_1h&extra=1', '/v1/cdn/metrics/bandwidth?period=last_7d&granularity=1m', '/v1/cdn/metrics/bandwidth?period=last_1h&granularity=2m',
    '/v1/cdn/metrics/top-urls?period=last_1h&limit=501', '/v1/cdn/metrics/top-urls?period=last_1h&ranked_by=bytes', '/v1/cdn/metrics/geography?period=last_1h&limit=0',
  ]) {
    const res = await send(viewer, 'GET', path);
    t.equal(res.status, 400, path);
    t.equal(res.body.code, 'VALIDATION_ERROR');
  }
  t.match((await send(viewer, 'GET', '/v1/cdn/metrics/bandwidth?period=last_7d&granularity=1m')).body.errors, [{ field: 'granularity' }]);
  for (const path of [`/v1/cdn/metrics/traffic?period=last_1h&origin_id=${randomUUID()}`, `/v1/cdn/metrics/cache?period=last_1h&cache_rule_id=${randomUUID()}`,
    `/v1/cdn/metrics/bandwidth?period=last_1h&endpoint_id=${randomUUID()}`, `/v1/cdn/metrics/geography?period=last_1h&endpoint_id=${randomUUID()}`]) {
    t.equal((await send(viewer, 'GET', path)).status, 404, path);
  }
  t.equal((await send(subscriber, 'GET', '/v1/cdn/metrics/traffic?period=last_1h')).status, 403);
  t.equal((await cp.request('GET', '/v1/cdn/metrics/traffic?period=last_1h')).status, 401);
  const empty = (await send(viewer, 'GET', '/v1/cdn/metrics/bandwidth?period=last_30d')).body;
  t.equal(empty.granularity, '6h');
  t.equal(empty.timeseries.length, 120);
});

t.test('reports the store cannot take are refused whole or in part: no id, minutes not aligned or too old, ids that are not UUIDs', async (t) => {
  const { endpoint: ep } = await makeEndpoint(cp, admin);
  const { agent } = await connect({ hostname: 'edge-bad' });
  const slice = { originId: '', cacheRuleId: '', requests: 1n, status2xx: 1n, responseTimeBuckets: buckets({ 0: 1 }) };
  agent.send({ case: 'trafficReport', value: { rollups: [{ minuteStartMs: BigInt(minute), endpointId: ep.id, slices: [slice] }] } });
  const id = randomUUID();
  agent.send({ case: 'trafficReport', value: { reportId: id, rollups: [
    { minuteStartMs: BigInt(minute + 1), endpointId: ep.id, slices: [slice] },
    { minuteStartMs: BigInt(minute - 2 * 86_400_000), endpointId: ep.id, slices: [slice] },
    { minuteStartMs: BigInt(minute), endpointId: 'not-a-uuid', slices: [slice] },
    { minuteStartMs: BigInt(minute), endpointId: ep.id, slices: [{ ...slice, originId: 'x' }, slice], topUrls: [{ url: 'no-slash', requests: 1n }], countries: [{ countryCode: 'fr', requests: 1n }] },
  ] } });
  await cp.app.edgeChannel!.hub.flush();
  await eventually(() => agent.received.some((m) => m.message.case === 'trafficReceipt'), 'confirmed');
  const bw = (await send(viewer, 'GET', `/v1/cdn/metrics/bandwidth?period=last_1h&endpoint_id=${ep.id}`)).body;
  t.equal(bw.total_bytes_transferred, 0);
  const traffic = await query<{ requests: string }>(cp, `select sum(requests)::int as requests from cdn_traffic_minute where endpoint_id = ?`, [ep.id]);
  t.equal(Number(traffic[0]!.requests), 1, 'only the one good slice of the one good rollup counts');
  t.equal((await query(cp, `select 1 from cdn_traffic_url_hour where endpoint_id = ?`, [ep.id])).length, 0);
});

t.test('retention drops whole partitions past their table\'s retention and forgets old report ids', async (t) => {
  const em = cp.app.db.orm.em.fork();
  const store = cp.app.trafficRollups!;
  await store.retain(em, new Date());
  const parts = async () => (await query<{ relname: string }>(cp, `select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid join pg_class p on p.oid = i.inhparent where p.relname = 'cdn_traffic_minute'`)).map((r) => r.relname);
  const now = await parts();
  t.ok(now.length >= 2, 'today\'s and tomorrow\'s minute partitions exist');
  const later = new Date(Date.now() + 9 * 86_400_000);
  const done = await store.retain(em, later);
  t.ok(done.dropped.some((p) => p.startsWith('cdn_traffic_minute_p')), 'old minute partitions dropped');
  t.ok(done.receipts >= 2, 'report ids older than a day forgotten');
  t.notOk((await parts()).some((p) => now.slice(0, 1).includes(p)), 'today\'s minutes are gone 9 days later');
  t.ok((await query(cp, `select 1 from pg_class where relname like 'cdn_traffic_hour_p%'`)).length >= 1, 'hours are kept 90 days');
});

t.test('a report the store fails to take waits for the next flush, then is stored once and confirmed', async (t) => {
  const { endpoint: ep } = await makeEndpoint(cp, admin);
  const real = cp.app.trafficRollups!;
  let failures = 2;
  cp.app.trafficRollups = {
    ...real,
    ingest: (em, reports, now) => (failures-- > 0 ? Promise.reject(new Error('database unavailable')) : real.ingest(em, reports, now)),
    totals: real.totals.bind(real), series: real.series.bind(real), topUrls: real.topUrls.bind(real), countries: real.countries.bind(real),
    rollUp: real.rollUp.bind(real), retain: real.retain.bind(real),
  };
  t.teardown(() => { cp.app.trafficRollups = real; });
  const { agent } = await connect({ hostname: 'edge-flaky' });
  const id = randomUUID();
  agent.send({ case: 'trafficReport', value: { reportId: id, rollups: [{ minuteStartMs: BigInt(minute), endpointId: ep.id, slices: [{ requests: 3n, status2xx: 3n, responseTimeBuckets: buckets({ 0: 3 }) }] }] } });
  await eventually(async () => {
    await cp.app.edgeChannel!.hub.flush();
    return agent.received.some((m) => m.message.case === 'trafficReceipt' && m.message.value.reportIds.includes(id));
  }, 'confirmed after two failed attempts');
  t.equal(failures, -1, 'stored on the third attempt');
  const rows = await query<{ requests: string }>(cp, `select sum(requests)::int as requests from cdn_traffic_minute where endpoint_id = ?`, [ep.id]);
  t.equal(Number(rows[0]!.requests), 3, 'counted once');
});
