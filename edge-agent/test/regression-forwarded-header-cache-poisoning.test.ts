// Issue 25, item 10 (cache poisoning, found by attack): the agent passed a
// viewer's `Forwarded: host=evil.example;proto=https` to the origin unchanged
// and unkeyed, so an origin echoing it into a public page poisoned the cache
// for every later viewer; likewise X-Real-IP, X-Forwarded-Port,
// X-Forwarded-Prefix, X-Original-Host, X-Original-URL, X-Rewrite-URL and
// X-HTTP-Method-Override. The agent now writes Forwarded itself (RFC 7239: one
// element with for, proto and the keyed host) and drops the others.
import t, { type Test } from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

const ATTACK = {
  forwarded: 'for=6.6.6.6;host=evil.example;proto=https',
  'x-forwarded-host': 'evil.example',
  'x-forwarded-proto': 'https',
  'x-forwarded-port': '8443',
  'x-forwarded-prefix': '/evil',
  'x-real-ip': '6.6.6.6',
  'x-original-host': 'evil.example',
  'x-original-url': '/admin',
  'x-rewrite-url': '/admin',
  'x-http-method-override': 'DELETE',
};

async function echoing(t: Test, origin: Record<string, unknown> = {}) {
  const o = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'public, max-age=300' });
    res.end(JSON.stringify(req.headers));
  });
  const edge = await startAgent(snapshotFor(o.port, { origin }));
  t.teardown(async () => { await edge.close(); await o.close(); });
  return { origin: o, edge };
}

t.test('RFC 7239: the viewer\'s Forwarded and override fields never reach the origin, and a poisoned page is never cached', async (t) => {
  const { origin, edge } = await echoing(t);
  const attacked = await edge.get('/page', ATTACK);
  const seen = JSON.parse(attacked.body) as Record<string, string>;
  t.equal(seen.forwarded, 'for=127.0.0.1;proto=http;host=cdn.test', 'the agent\'s own Forwarded: the peer, the scheme, the keyed host');
  t.equal(seen['x-forwarded-host'], 'cdn.test');
  t.equal(seen['x-forwarded-proto'], 'http');
  for (const name of ['x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip', 'x-original-host', 'x-original-url', 'x-rewrite-url', 'x-http-method-override']) {
    t.equal(seen[name], undefined, `${name} is dropped`);
  }
  t.notMatch(attacked.body, /evil|6\.6\.6\.6|admin|DELETE|8443/, 'nothing the attacker sent reached the origin');
  const clean = await edge.get('/page');
  t.equal(clean.headers['x-cache-status'], 'HIT', 'the same object for every viewer: the fields were not part of it');
  t.notMatch(clean.body, /evil/);
  t.equal(origin.count('/page'), 1);
});

t.test('RFC 7239 §5.3: without forward_host_header the key holds no viewer host, and neither does Forwarded', async (t) => {
  const { edge } = await echoing(t, { forward_host_header: false });
  const seen = JSON.parse((await edge.get('/page', ATTACK)).body) as Record<string, string>;
  t.equal(seen.forwarded, 'for=127.0.0.1;proto=http');
  t.equal(seen['x-forwarded-host'], undefined);
  t.match(seen.host, /^127\.0\.0\.1:\d+$/, 'the origin\'s own Host');
});

t.test('RFC 7239 §4: a request header policy may still set one of those fields for the origin itself', async (t) => {
  const o = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' });
    res.end(JSON.stringify(req.headers));
  });
  const snapshot = snapshotFor(o.port, { endpoint: { response_headers_policy_id: 'p1' } }) as Record<string, unknown>;
  snapshot.response_headers_policies = [{ id: 'p1', name: 'p1', custom_request_headers: [{ name: 'X-Real-IP', value: 'set-by-policy', override: true }] }];
  const edge = await startAgent(snapshot);
  t.teardown(async () => { await edge.close(); await o.close(); });
  const seen = JSON.parse((await edge.get('/p', { 'x-real-ip': '6.6.6.6' })).body) as Record<string, string>;
  t.equal(seen['x-real-ip'], 'set-by-policy', 'the operator\'s value, not the viewer\'s');
});

/** Scheme, method, URL, host and client claims frameworks read (Rack, Django, Spring, IIS, Envoy, Akamai), none keyed. */
const FRAMEWORK_OVERRIDES = {
  'x-forwarded-scheme': 'https',
  'x-forwarded-ssl': 'on',
  'front-end-https': 'on',
  'x-url-scheme': 'https',
  'x-forwarded-protocol': 'https',
  'x-http-method': 'DELETE',
  'x-method-override': 'DELETE',
  'x-original-method': 'DELETE',
  'x-forwarded-uri': '/admin',
  'x-forwarded-path': '/admin',
  'x-envoy-original-path': '/admin',
  'x-host': 'evil.example',
  'x-forwarded-server': 'evil.example',
  'true-client-ip': '6.6.6.6',
};

t.test('every viewer field that can change an origin\'s answer is dropped: scheme, method, URL, host and client claims', async (t) => {
  // An origin that answers as a Rack app behind a proxy does: a redirect to https when any scheme field says so.
  const o = await startOrigin((req, res) => {
    const claimsHttps = ['x-forwarded-scheme', 'x-url-scheme', 'x-forwarded-protocol'].some((n) => req.headers[n] === 'https')
      || req.headers['x-forwarded-ssl'] === 'on' || req.headers['front-end-https'] === 'on';
    if (claimsHttps) {
      res.writeHead(301, { location: 'https://cdn.test/page', 'cache-control': 'public, max-age=300' });
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'public, max-age=300' });
    res.end(JSON.stringify(req.headers));
  });
  const edge = await startAgent(snapshotFor(o.port));
  t.teardown(async () => { await edge.close(); await o.close(); });
  const attacked = await edge.get('/page', FRAMEWORK_OVERRIDES);
  t.equal(attacked.status, 200, 'no self-redirect: the origin never saw a viewer\'s scheme claim');
  const seen = JSON.parse(attacked.body) as Record<string, string>;
  for (const name of Object.keys(FRAMEWORK_OVERRIDES)) t.equal(seen[name], undefined, `${name} is dropped`);
  t.notMatch(attacked.body, /evil|6\.6\.6\.6|admin|DELETE/, 'nothing the attacker sent reached the origin');
  const clean = await edge.get('/page');
  t.equal(clean.status, 200);
  t.equal(clean.headers['x-cache-status'], 'HIT', 'one object for every viewer');
  t.equal(o.count('/page'), 1);
});

t.test('an operator still sends those fields to the origin: a request header policy and the origin\'s custom headers', async (t) => {
  const o = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' });
    res.end(JSON.stringify(req.headers));
  });
  const snapshot = snapshotFor(o.port, { endpoint: { response_headers_policy_id: 'p1' }, origin: { custom_headers: { 'True-Client-IP': 'set-by-origin', 'X-Forwarded-Server': 'edge' } } }) as Record<string, unknown>;
  snapshot.response_headers_policies = [{ id: 'p1', name: 'p1', custom_request_headers: [
    { name: 'X-Forwarded-Ssl', value: 'on', override: true },
    { name: 'X-HTTP-Method', value: 'GET', override: false },
  ] }];
  const edge = await startAgent(snapshot);
  t.teardown(async () => { await edge.close(); await o.close(); });
  const seen = JSON.parse((await edge.get('/p', FRAMEWORK_OVERRIDES)).body) as Record<string, string>;
  t.equal(seen['x-forwarded-ssl'], 'on', 'the policy\'s value');
  t.equal(seen['x-http-method'], 'GET', 'a fill-if-missing policy header: the viewer\'s is gone, so the operator\'s goes');
  t.equal(seen['true-client-ip'], 'set-by-origin', 'the origin\'s custom header, not the viewer\'s');
  t.equal(seen['x-forwarded-server'], 'edge');
  t.equal(seen['x-envoy-original-path'], undefined, 'fields the operator does not set stay dropped');
});
