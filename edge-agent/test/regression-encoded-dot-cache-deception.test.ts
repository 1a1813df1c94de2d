// Regression: web cache deception through encoded dots. "GET /static/%2e%2e/account"
// with a victim's cookie matched the /static/* cache rule, an origin that
// normalises the path answered with the victim's account page, and the agent
// stored it under the /static rule and served it to a cookieless attacker.
// The path is now normalised before rule matching and keying: the request is
// for /account, which no cache rule covers.
import t from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('an encoded-dot path is matched against cache rules as the path it names', async (t) => {
  // Like most application servers, this origin resolves dot segments (WHATWG URL parsing treats %2e as a dot).
  const origin = await startOrigin((req, res) => {
    const path = new URL(req.url!, 'http://origin').pathname;
    if (path === '/account') {
      const who = /session=(\w+)/.exec(req.headers.cookie ?? '')?.[1] ?? 'anonymous';
      res.writeHead(200, { 'content-type': 'text/html' }); // no freshness information: dynamic
      res.end(`account page of ${who}`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/css' });
    res.end(`static ${path}`);
  });
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [{ id: 'static', ttl_seconds: 3600, match: { paths: ['/static/*'] } }] }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const get = (target: string, cookie?: string) =>
    rawRequest(edge.port, [`GET ${target} HTTP/1.1`, `Host: ${HOST}`, ...(cookie ? [`Cookie: ${cookie}`] : []), 'Connection: close']);

  for (const target of ['/static/%2e%2e/account', '/static/%2E%2E/account', '/static/.%2e/account', '/static/x/../../account']) {
    const victim = await get(target, 'session=victim');
    t.equal(victim.body, 'account page of victim', `${target}: the victim gets their page`);
    const attacker = await get(target);
    t.equal(attacker.body, 'account page of anonymous', `${target}: the attacker does not get the victim's page`);
    t.not(attacker.headers['x-cache-status'], 'HIT');
  }
  t.notOk(origin.requests.some((r) => r.url !== '/account'), 'the origin only ever saw /account');

  // The rule still does its job for what really is under /static.
  await get('/static/site.css');
  const hit = await get('/static/./site.css');
  t.equal(hit.headers['x-cache-status'], 'HIT', '/static/./site.css is /static/site.css');
  t.equal(hit.body, 'static /static/site.css');
});
