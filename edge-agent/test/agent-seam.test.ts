import t from 'tap';
import { request } from 'undici';
import { ConfigRefusedError } from '../src/agent.ts';
import { startAgent, startOrigin, snapshotFor, HOST } from './helpers.ts';

t.test('applyConfig refuses a bad snapshot and keeps serving the previous one', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('ok'));
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  t.throws(() => edge.agent.applyConfig({ version: 2, endpoints: [{ id: 'x', hostname: 'h', default_origin_id: 'missing', origins: [{ id: 'o', host: 'a' }] }] }), ConfigRefusedError);
  t.throws(() => edge.agent.applyConfig({ version: 'nope' }), ConfigRefusedError);
  t.equal(edge.agent.configVersion, 1);
  t.equal((await edge.get('/')).status, 200, 'still serving');
});

t.test('routes: priority, host wildcard, path glob, method; strip_prefix, path_prefix, Host forwarding, custom headers', async (t) => {
  const a = await startOrigin((req, res) => res.end(`A ${req.url} host=${req.headers.host} x=${req.headers['x-secret'] ?? ''}`));
  const b = await startOrigin((req, res) => res.end(`B ${req.url} host=${req.headers.host}`));
  const snap = snapshotFor(a.port, {
    origin: { custom_headers: { 'X-Secret': 's1' } },
    origins: [{ id: 'o2', scheme: 'http', host: '127.0.0.1', port: b.port, allow_private_network: true, path_prefix: '/base', forward_host_header: false, max_retries: 0 }],
    endpoint: { custom_domains: [{ hostname: 'www.customer.test' }] },
    routes: [
      { id: 'r-api', origin_id: 'o2', priority: 10, match: { paths: ['/api/*'], methods: ['GET'] }, strip_prefix: '/api' },
      { id: 'r-low', origin_id: 'o1', priority: 5, match: { paths: ['/api/special'] } },
      { id: 'r-host', origin_id: 'o2', priority: 20, match: { hosts: ['*.customer.test'] } },
    ],
  });
  const edge = await startAgent(snap);
  t.teardown(async () => { await edge.close(); await a.close(); await b.close(); });
  t.equal((await edge.get('/api/v1/items?q=1')).body, `B /base/v1/items?q=1 host=127.0.0.1:${b.port}`, 'strip_prefix, path_prefix, origin Host');
  t.match((await edge.get('/api/special')).body, /^A \/api\/special/, 'lower priority value wins');
  t.match((await edge.get('/api/v1', {}, 'POST', 'x')).body, /^A /, 'method condition');
  t.equal((await edge.get('/page')).body, `A /page host=${HOST} x=s1`, 'default origin with forwarded Host and custom header');
  t.match((await edge.get('/page', { host: 'www.customer.test' })).body, /^B \/base\/page/, 'custom domain + host wildcard route');
});

t.test('cache rule: ttl for responses without freshness, key query params, bypass, browser ttl, content types', async (t) => {
  let n = 0;
  const origin = await startOrigin((req, res) => {
    n++;
    res.writeHead(200, { 'content-type': req.url!.startsWith('/img') ? 'image/png' : 'text/html' });
    res.end(`${req.url} #${n}`);
  });
  const edge = await startAgent(snapshotFor(origin.port, {
    cache_rules: [{
      id: 'r', ttl_seconds: 60, browser_ttl_seconds: 30, match: { paths: ['/*'], content_types: ['image/'] },
      cache_key: { include_query_params: ['w'] }, bypass: { if_cookie_present: ['session'] }, cache_status_header: true,
    }],
  }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/img/a.png?w=100&utm=1');
  const hit = await edge.get('/img/a.png?utm=2&w=100');
  t.equal(hit.headers['x-cache-status'], 'HIT', 'ignored query params do not split the key');
  t.equal(hit.headers['cache-control'], 'public, max-age=30', 'browser TTL');
  t.equal((await edge.get('/img/a.png?w=200')).headers['x-cache-status'], 'MISS', 'included param is part of the key');
  t.equal((await edge.get('/img/a.png?w=100', { cookie: 'session=1' })).headers['x-cache-status'], 'BYPASS');
  await edge.get('/page');
  t.equal((await edge.get('/page')).headers['x-cache-status'], 'MISS', 'content type outside the rule: plain RFC 9111 (not cacheable)');
});

t.test('persisted snapshot is served after a restart; prefetch, health report, traffic rollups and /metrics', async (t) => {
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=60' });
    res.end('warm');
  });
  const first = await startAgent(snapshotFor(origin.port, { version: 7 }));
  const dataDir = first.dataDir;
  await first.agent.close(500);
  const edge = await startAgent(null, { dataDir });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  t.equal(edge.agent.restore(), 7, 'restored from DATA_DIR');
  const pf = await edge.agent.prefetch('ep1', ['/a', `http://${HOST}/b`]);
  t.same(pf, { fetched: 2, failed: 0, failed_urls: [] });
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT', 'prefetched object is a hit');
  const report = edge.agent.healthReport();
  t.equal(report.configVersion, 7);
  t.equal(report.cacheObjects, 2);
  const rollups = edge.agent.takeTrafficRollups();
  t.equal(rollups[0].endpointId, 'ep1');
  t.equal(rollups[0].requests, 3);
  t.equal(rollups[0].cacheStatuses.HIT, 1);
  t.equal(rollups[0].topUrls.length, 2);
  const m = await edge.agent.listenMetrics(0, '127.0.0.1');
  const text = await (await request(`http://127.0.0.1:${m.port}/metrics`)).body.text();
  t.match(text, /edge_cache_requests_total\{endpoint="ep1",cache_status="HIT"\} 1/);
  t.match(text, /edge_config_version 7/);
  t.match(text, /edge_request_duration_seconds_bucket/);
  t.match(text, /edge_agent_process_cpu/);
  const hz = await request(`http://127.0.0.1:${m.port}/healthz`);
  t.equal(hz.statusCode, 200);
  await hz.body.dump();
});
