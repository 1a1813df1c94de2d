// Traffic analytics end to end (issue 24 "Done means"): a control-plane
// process and two edge-agent processes (one behind a TCP proxy), known
// traffic from two countries through both; every metrics route reads back
// the totals the viewers saw (requests, status classes, cache statuses,
// bytes, top URLs, countries and continents), p95/p99 equal to what the
// agents' own histograms give merged; a report whose receipt was lost is sent
// again after the reconnect and is not counted twice. Under an origin shield the
// routes count viewer requests only, never the shield's hops.
import t from 'tap';
import { histogramQuantile } from '../../control-plane/src/cdn-analytics/metrics-service.ts';
import { parseClientAddress } from '../../edge-agent/src/policy/client-address.ts';
import { packagedCountryDatabase } from '../../edge-agent/src/policy/geo.ts';
import { RESPONSE_TIME_BUCKETS_MS } from '../../shared/src/metrics/buckets.ts';
import {
  agentHealth, agentMetrics, endpointOn, metricSum, publishedEndpoint, publishedToAll, shieldsKnown, startCountingOrigin, startDeployment, startEdgeAgent, startShieldAgent,
  viewerGet, type AgentProcess,
} from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { detectServices } from '../support/services.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

const { postgresUrl } = await detectServices();
if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else await t.test('traffic analytics through two agents', { timeout: 240_000 }, async (t) => {
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_TRAFFIC_REPORT_INTERVAL_MS: '300' } });
  const origin = await startCountingOrigin(t, (req, res) => {
    if (req.url !== '/missing') return false;
    res.writeHead(404, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
    res.end('no such thing');
    return true;
  });
  const endpoint = await publishedEndpoint(deployment, origin.port, 'analytics');
  const proxy = await startTcpProxy('127.0.0.1', deployment.grpcPort);
  t.teardown(() => proxy.cut());
  const trust = { TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.0/8' };
  const a = await startEdgeAgent(t, deployment, proxy.port, 'edge-a', trust);
  const b = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-b', trust);
  for (const agent of [a, b]) await eventually(async () => (await agentHealth(agent)).config_version > 0, 'agent has the configuration');

  const db = packagedCountryDatabase();
  const viewers = { us: '8.8.8.8', other: '81.2.69.160' };
  const countryOf = (ip: string) => db.country(parseClientAddress(ip))!;
  const seen = { requests: 0, bytes: 0, statuses: {} as Record<string, number>, classes: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 } as Record<string, number> };
  const get = async (agent: AgentProcess, path: string, ip: string, headers: Record<string, string> = {}) => {
    const res = await viewerGet(agent.port, endpoint.hostname, path, { 'x-forwarded-for': ip, ...headers });
    seen.requests++;
    seen.bytes += Buffer.byteLength(res.body);
    const status = String(res.headers['x-cache-status']);
    seen.statuses[status] = (seen.statuses[status] ?? 0) + 1;
    seen.classes[`${Math.floor(res.status / 100)}xx`]++;
    return res;
  };
  for (let i = 0; i < 6; i++) await get(a, '/a', viewers.us);
  // /b's viewers reach the agent over HTTPS through the trusted balancer (which says so); the others over plain HTTP.
  for (let i = 0; i < 3; i++) await get(b, '/b', viewers.other, { 'x-forwarded-proto': 'https' });
  t.equal((await get(b, '/missing', viewers.other)).status, 404);

  const api = (path: string) => deployment.must('GET', path);
  await eventually(async () => (await api('/v1/cdn/metrics/traffic?period=last_1h')).total_requests === 10, 'the ten requests counted', 60_000);

  const traffic = await api('/v1/cdn/metrics/traffic?period=last_1h');
  t.same(traffic.by_status_class, seen.classes, 'status classes as the viewers saw them');
  t.equal(traffic.error_rate, 0.1);
  t.equal(traffic.bytes_served, seen.bytes, 'bytes as the viewers received them');
  const fromCache = (seen.statuses.HIT ?? 0) + (seen.statuses.STALE ?? 0) + (seen.statuses.UPDATING ?? 0) + (seen.statuses.REVALIDATED ?? 0);
  t.equal(traffic.cache_hit_rate, Math.round((fromCache / (10 - (seen.statuses.BYPASS ?? 0))) * 10_000) / 10_000);

  // p95 and p99 are what the agents' own histograms give, merged.
  const merged = new Array(RESPONSE_TIME_BUCKETS_MS.length + 1).fill(0);
  for (const agent of [a, b]) {
    const port = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    let previous = 0;
    for (const [i, le] of [...RESPONSE_TIME_BUCKETS_MS.map((ms) => String(ms / 1000)), '+Inf'].entries()) {
      const m = new RegExp(`edge_request_duration_seconds_bucket\\{endpoint="${endpoint.id}",le="${le.replace('+', '\\+')}"\\} (\\d+)`).exec(text);
      const cumulative = m ? Number(m[1]) : previous;
      merged[i] += cumulative - previous;
      previous = cumulative;
    }
  }
  t.equal(merged.reduce((x, y) => x + y, 0), 10, 'the agents counted ten answers');
  t.equal(traffic.p95_response_time_ms, histogramQuantile(merged, 0.95), 'p95 from the merged histograms');
  t.equal(traffic.p99_response_time_ms, histogramQuantile(merged, 0.99), 'p99 from the merged histograms');
  t.same((await api(`/v1/cdn/metrics/traffic?period=last_24h&origin_id=${(await api(`/v1/cdn/endpoints/${endpoint.id}`)).default_origin_id}`)).total_requests, 10, 'by origin');

  const cache = await api('/v1/cdn/metrics/cache?period=last_1h');
  t.equal(cache.hit_count, seen.statuses.HIT ?? 0);
  t.equal(cache.miss_count, (seen.statuses.MISS ?? 0) + (seen.statuses.EXPIRED ?? 0));
  t.equal(cache.bypass_count, seen.statuses.BYPASS ?? 0);
  t.equal(cache.bytes_from_cache + cache.bytes_from_origin, seen.bytes);

  const bw = await api(`/v1/cdn/metrics/bandwidth?period=last_6h&endpoint_id=${endpoint.id}`);
  t.equal(bw.total_bytes_transferred, seen.bytes);
  t.equal(bw.timeseries.length, 72);
  t.equal(bw.timeseries.reduce((s: number, p: { bytes_transferred: number }) => s + p.bytes_transferred, 0), seen.bytes);

  const top = await api(`/v1/cdn/metrics/top-urls?period=last_1h&endpoint_id=${endpoint.id}`);
  t.same(top.items.map((i: { url: string; request_count: number }) => [i.url, i.request_count]), [
    [`http://${endpoint.hostname}/a`, 6], [`https://${endpoint.hostname}/b`, 3], [`http://${endpoint.hostname}/missing`, 1],
  ], 'each URL with the scheme its viewers used (plain HTTP is not reported as https://)');
  t.equal(top.items[0].cache_status_breakdown.HIT, 5, '/a: one miss, then five hits');

  const geo = await api('/v1/cdn/metrics/geography?period=last_24h');
  const expected = new Map<string, number>([[countryOf(viewers.us), 6]]);
  expected.set(countryOf(viewers.other), (expected.get(countryOf(viewers.other)) ?? 0) + 4);
  t.same(Object.fromEntries(geo.by_country.map((c: { country_code: string; request_count: number }) => [c.country_code, c.request_count])), Object.fromEntries(expected));
  t.equal(geo.by_country.find((c: { country_code: string }) => c.country_code === countryOf(viewers.other)).error_rate, 0.25);
  t.equal(geo.by_continent.reduce((s: number, c: { request_count: number }) => s + c.request_count, 0), 10);

  // A report stored by the control plane whose receipt never reaches agent A: sent again after the reconnect, counted once.
  proxy.freezeDownstream(true);
  await get(a, '/a', viewers.us);
  await get(a, '/c', viewers.us);
  await eventually(async () => (await api('/v1/cdn/metrics/traffic?period=last_1h')).total_requests === 12, 'the report stored', 60_000);
  proxy.drop();
  proxy.freezeDownstream(false);
  await eventually(() => a.logs.some((l) => l.includes('traffic reports not confirmed by the control plane sent again')), 'agent A sends the report again', 60_000);
  await eventually(async () => (await agentHealth(a)).config_version > 0 && !(await agentHealth(a)).control_plane_cut_off, 'agent A back');
  // Several report intervals later, nothing was added twice.
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const after = await api('/v1/cdn/metrics/traffic?period=last_1h');
  t.equal(after.total_requests, 12, 'the replayed report counted once');
  const c = (await api(`/v1/cdn/metrics/top-urls?period=last_1h&endpoint_id=${endpoint.id}`)).items.find((i: { url: string }) => i.url.endsWith('/c'));
  t.equal(c.request_count, 1);

  // The control plane's Prometheus metrics: agents, acks, ack latencies, traffic reports (the copy counted as one).
  await deployment.must('POST', '/v1/cdn/cache/purge', { purge_type: 'path', paths: ['/a'] });
  const scrape = async () => (await fetch(`${deployment.process.url}/metrics`)).text();
  const value = (text: string, series: string) => Number(new RegExp(`^${series.replace(/[{}"+]/g, (c) => `\\${c}`)} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  await eventually(async () => value(await scrape(), 'edge_channel_purge_ack_seconds_count{outcome="ok"}') >= 2, 'both agents\' purge acks timed');
  const text = await scrape();
  t.equal(value(text, 'edge_channel_connected_agents'), 2);
  t.ok(value(text, 'edge_channel_acks_total{kind="config",outcome="ok"}') >= 2);
  t.ok(value(text, 'edge_channel_acks_total{kind="purge",outcome="ok"}') >= 2);
  t.ok(value(text, 'edge_channel_config_ack_seconds_count{outcome="applied"}') >= 2);
  t.ok(value(text, 'edge_channel_traffic_reports_total{outcome="stored"}') >= 2);
  t.ok(value(text, 'edge_channel_traffic_reports_total{outcome="copy"}') >= 1, 'the report sent again is counted as a copy');
  t.ok(value(text, 'edge_channel_traffic_rollups_total') >= 3);
});

if (postgresUrl) await t.test('under a shield the metrics routes count viewer requests only; the shield\'s hops are its own Prometheus series', { timeout: 240_000 }, async (t) => {
  // Heartbeats every 2 s: a loaded host must not make the shield look offline (3 intervals) and drop it from the map.
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_TRAFFIC_REPORT_INTERVAL_MS: '300', EDGE_HEARTBEAT_INTERVAL_MS: '2000' } });
  let fetched = 0;
  const origin = await startCountingOrigin(t, (req, res) => {
    if (req.url === '/video.ts') fetched++;
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
    res.end('x'.repeat(1000));
    return true;
  });
  const shield = await startShieldAgent(t, deployment, 'shield', 'shield-r');
  const edges = [await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-1', { REGION: 'edge-r' }), await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-2', { REGION: 'edge-r' })];
  await shieldsKnown([shield, ...edges], ['shield-r']);
  const endpoint = await endpointOn(deployment, origin.port, 'shielded analytics', { shield_region: 'shield-r' });
  await publishedToAll(deployment, [shield, ...edges], 'shielded analytics');
  const api = (path: string) => deployment.must('GET', path);

  // Three viewers of the edges: a miss the shield fills, a miss the shield answers from its cache, a hit.
  const statuses = [];
  for (const edge of [edges[0]!, edges[1]!, edges[0]!]) statuses.push((await viewerGet(edge.port, endpoint.hostname, '/video.ts')).headers['x-cache-status']);
  t.same(statuses, ['MISS', 'MISS', 'HIT']);
  t.equal(fetched, 1, 'one origin request, by the shield');
  await eventually(async () => (await api('/v1/cdn/metrics/traffic?period=last_1h')).total_requests >= 3, 'the edges\' three requests counted', 60_000);
  // A viewer of the shield itself: its report, which would carry the two hops if they counted, is in once this is.
  t.equal((await viewerGet(shield.port, endpoint.hostname, '/video.ts')).headers['x-cache-status'], 'HIT');
  await eventually(async () => (await api('/v1/cdn/metrics/traffic?period=last_1h')).total_requests >= 4, 'the shield\'s viewer counted', 60_000);

  const traffic = await api('/v1/cdn/metrics/traffic?period=last_1h');
  t.equal(traffic.total_requests, 4, 'four viewer requests, not the two hops besides');
  t.equal(traffic.bytes_served, 4000, 'the bytes the viewers received');
  t.equal((await api(`/v1/cdn/metrics/bandwidth?period=last_1h&endpoint_id=${endpoint.id}`)).total_bytes_transferred, 4000);
  const top = await api(`/v1/cdn/metrics/top-urls?period=last_1h&endpoint_id=${endpoint.id}`);
  t.same(top.items.map((i: { url: string; request_count: number }) => [i.url, i.request_count]), [[`http://${endpoint.hostname}/video.ts`, 4]]);

  const text = await agentMetrics(shield);
  t.equal(metricSum(text, 'edge_requests_total', { endpoint: endpoint.id }), 1, 'the shield counts its own viewer as a viewer request');
  t.equal(metricSum(text, 'edge_shield_requests_total', { endpoint: endpoint.id }), 2, 'and the two hops apart');
  t.equal(metricSum(text, 'edge_shield_requests_total', { endpoint: endpoint.id, cache_status: 'HIT' }), 1, 'one of them answered from its cache');
  t.equal(metricSum(text, 'edge_shield_bytes_total', { endpoint: endpoint.id }), 2000);
  for (const edge of edges) t.equal(metricSum(await agentMetrics(edge), 'edge_shield_requests_total'), 0, 'an edge answered no hop');
});
