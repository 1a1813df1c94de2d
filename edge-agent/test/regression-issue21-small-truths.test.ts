// Issue 21 item 9, the agent's part: a cache rule with cache_status_header
// false sent Cache-Status anyway (with the node's region and the remaining
// TTL); an origin without health_check_url was never probed, though its
// health check defaults to the origin's root; and error answers (404, 501)
// were cached for the rule's full TTL, where they now get its negative-caching
// TTL (10 s by default) unless the origin states their freshness itself.
import t from 'tap';
import type { EdgeAgent } from '../src/agent.ts';
import { sleep, startAgent, startOrigin, snapshotFor } from './helpers.ts';

const rule = (extra: Record<string, unknown> = {}) => ({ id: 'r1', match: { paths: ['/**'] }, ttl_seconds: 600, ...extra });

t.test('regression: cache_status_header false hides Cache-Status (the region, the TTL) as well as X-Cache-Status, on hits, misses and refusals', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/down') {
      req.socket.destroy();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
  });
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [rule({ cache_status_header: false })] }), { region: 'eu-secret' });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const miss = await edge.get('/a');
  const hit = await edge.get('/a');
  const refused = await edge.get('/down');
  t.equal(refused.status, 502);
  for (const [what, res] of [['miss', miss], ['hit', hit], ['refusal', refused]] as const) {
    t.equal(res.headers['cache-status'], undefined, `${what}: no Cache-Status`);
    t.equal(res.headers['x-cache-status'], undefined, `${what}: no X-Cache-Status`);
    t.notOk(JSON.stringify(res.headers).includes('eu-secret'), `${what}: the region is nowhere`);
  }
  t.match(hit.headers.age, /^\d+$/, 'Age stays (RFC 9111)');

  const shown = await startAgent(snapshotFor(origin.port, { cache_rules: [rule()] }), { region: 'eu-shown' });
  t.teardown(() => shown.close());
  await shown.get('/a');
  t.match((await shown.get('/a')).headers['cache-status'], /^edge-eu-shown; hit; ttl=\d+$/, 'the default still shows both');
});

async function probed(agent: EdgeAgent, pred: (o: ReturnType<EdgeAgent['healthReport']>['origins'][number]) => boolean) {
  for (let i = 0; i < 200; i++) {
    const o = agent.healthReport().origins.find((x) => x.originId === 'o1');
    if (o && pred(o)) return o;
    await sleep(25);
  }
  throw new Error(`never probed as expected: ${JSON.stringify(agent.healthReport().origins)}`);
}

t.test('regression: an origin without health_check_url is probed at its root (a 4xx there still means it answers; no answer is a failure)', async (t) => {
  let status = 404;
  const origin = await startOrigin((req, res) => {
    if (req.url === '/base/' && status >= 500) req.socket.destroy();
    else {
      res.writeHead(req.url === '/base/' ? status : 200);
      res.end();
    }
  });
  const edge = await startAgent(snapshotFor(origin.port, { origin: { path_prefix: '/base', health_check_interval_seconds: 1 } }), { healthProbes: true });
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const healthy = await probed(edge.agent, (o) => o.status !== 'unknown');
  t.equal(healthy.status, 'healthy', 'a 404 at the root: the origin answers');
  t.ok(origin.count('/base/') >= 1, 'probed at the root of its path_prefix');
  status = 500;
  const failing = await probed(edge.agent, (o) => o.consecutiveFailures >= 1);
  t.equal(failing.status, 'degraded', 'no answer at all: a failure');
});

t.test('regression: error answers without explicit freshness are cached for the rule\'s negative-caching TTL, not its TTL', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/explicit') res.writeHead(404, { 'cache-control': 'max-age=120' });
    else res.writeHead(req.url === '/501' ? 501 : 404);
    res.end('no');
  });
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [rule()] }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const path of ['/missing', '/501']) {
    await edge.get(path);
    const hit = await edge.get(path);
    t.equal(hit.headers['x-cache-status'], 'HIT', `${path} cached`);
    t.match(hit.headers['cache-status'], /; ttl=(10|9)$/, `${path}: for 10 s, the default negative TTL (the rule says 600)`);
  }
  await edge.get('/explicit');
  t.match((await edge.get('/explicit')).headers['cache-status'], /; ttl=(120|119)$/, 'the origin\'s own freshness wins');

  const none = await startAgent(snapshotFor(origin.port, { cache_rules: [rule({ negative_ttl_seconds: 0 })] }));
  t.teardown(() => none.close());
  await none.get('/missing');
  t.equal((await none.get('/missing')).headers['x-cache-status'], 'MISS', 'negative_ttl_seconds 0: errors are not cached');
});
