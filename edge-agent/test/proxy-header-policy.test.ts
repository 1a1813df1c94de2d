// Response headers policies on the agent's answers, with a real origin: the
// endpoint's policy and a route's (which wins), security and custom headers
// with override true/false on misses, hits, 304s and refusals, removals, the
// request side (custom and removed request headers reach the origin as
// configured, and the cache key follows what is forwarded), CORS on actual
// answers and preflights answered at the edge.
import t from 'tap';
import { trustedProxy } from '../src/policy/client-address.ts';
import { HOST, rawRequest, startAgent, startOrigin } from './helpers.ts';

const origin = await startOrigin((req, res) => {
  const headers: Record<string, string> = { 'content-type': 'text/plain', 'cache-control': 'max-age=600', etag: '"v1"', 'x-frame-options': 'SAMEORIGIN', server: 'origin/1.0', 'x-powered-by': 'php' };
  if (req.url?.startsWith('/cors-origin')) headers['access-control-allow-origin'] = 'https://origin-says.example';
  res.writeHead(200, headers);
  res.end(`${req.url} device=${req.headers['x-device'] ?? '-'} secret=${req.headers['x-secret'] ?? '-'} tenant=${req.headers['x-tenant'] ?? '-'}`);
});
t.teardown(() => origin.close());

const sitePolicy = {
  id: 'site',
  security_headers: {
    strict_transport_security: { enabled: true, max_age_seconds: 63072000, include_subdomains: true, preload: true },
    content_security_policy: { enabled: true, policy: "default-src 'self'", report_only: true },
    x_content_type_options: { enabled: true },
    x_frame_options: { enabled: true, value: 'DENY', override: false },
    referrer_policy: { enabled: true, value: 'no-referrer' },
    permissions_policy: { enabled: true, policy: 'camera=()' },
    x_xss_protection: { enabled: true, value: '0' },
  },
  custom_response_headers: [{ name: 'X-Served-By', value: 'edge' }, { name: 'Server', value: 'edge-server', override: false }],
  remove_response_headers: ['X-Powered-By'],
  custom_request_headers: [{ name: 'X-Tenant', value: 'acme' }, { name: 'X-Device', value: 'desktop', override: false }],
  remove_request_headers: ['X-Secret'],
};
const apiPolicy = {
  id: 'api',
  cors: {
    enabled: true, allow_origins: ['https://app.example', 'https://*.partner.example'], allow_methods: ['GET', 'PUT'], allow_headers: ['X-Token', 'Content-Type'],
    expose_headers: ['X-Served-By'], allow_credentials: true, max_age_seconds: 600,
  },
  custom_response_headers: [{ name: 'X-Served-By', value: 'api-route' }],
};
const openPolicy = { id: 'open', cors: { enabled: true, expose_headers: ['ETag'] } };
const keepOriginCors = { id: 'keep', cors: { enabled: true, allow_origins: ['https://app.example'], override_origin: false } };

const edge = await startAgent({
  version: 1,
  endpoints: [{
    id: 'ep1', hostname: HOST, default_origin_id: 'o1', response_headers_policy_id: 'site',
    origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
    routes: [
      { id: 'api', origin_id: 'o1', priority: 1, match: { paths: ['/api/*'] }, response_headers_policy_id: 'api' },
      { id: 'open', origin_id: 'o1', priority: 2, match: { paths: ['/open/*'] }, response_headers_policy_id: 'open' },
      { id: 'keep', origin_id: 'o1', priority: 3, match: { paths: ['/cors-origin/*'] }, response_headers_policy_id: 'keep' },
    ],
    cache_rules: [{ id: 'keyed', ttl_seconds: 600, match: { paths: ['/keyed/*'] }, cache_key: { include_headers: ['x-secret', 'x-device'] } }],
  }],
  response_headers_policies: [sitePolicy, apiPolicy, openPolicy, keepOriginCors],
}, { trustedProxy: trustedProxy('x-forwarded-for', '127.0.0.1/32') });
/** What a TLS-terminating proxy in front of the agent says of a viewer that came over HTTPS (HSTS goes over HTTPS only). */
const https = { 'x-forwarded-proto': 'https' };
t.teardown(() => edge.close());

t.test('the endpoint policy on a miss and on hits: security headers, custom headers, removals, override false keeping the origin\'s header', async (t) => {
  const miss = await edge.get('/page', https);
  const hit = await edge.get('/page', https);
  t.equal(miss.headers['x-cache-status'], 'MISS');
  t.equal(hit.headers['x-cache-status'], 'HIT');
  for (const r of [miss, hit]) {
    t.equal(r.headers['strict-transport-security'], 'max-age=63072000; includeSubDomains; preload');
    t.equal(r.headers['content-security-policy-report-only'], "default-src 'self'");
    t.equal(r.headers['content-security-policy'], undefined, 'report_only sends the report-only field only');
    t.equal(r.headers['x-content-type-options'], 'nosniff');
    t.equal(r.headers['x-frame-options'], 'SAMEORIGIN', 'override false: the origin\'s value stays');
    t.equal(r.headers['referrer-policy'], 'no-referrer');
    t.equal(r.headers['permissions-policy'], 'camera=()');
    t.equal(r.headers['x-xss-protection'], '0');
    t.equal(r.headers['x-served-by'], 'edge');
    t.equal(r.headers.server, 'origin/1.0', 'override false on a custom header: the origin\'s stays');
    t.equal(r.headers['x-powered-by'], undefined, 'removed');
  }
  const again = await edge.get('/page', https);
  t.equal(again.headers['x-served-by'], 'edge', 'one value: the stored head was not edited in place');
  const notModified = await edge.get('/page', { ...https, 'if-none-match': '"v1"' });
  t.equal(notModified.status, 304);
  t.equal(notModified.headers['strict-transport-security'], 'max-age=63072000; includeSubDomains; preload');
  const range = await edge.get('/page', { ...https, range: 'bytes=0-3' });
  t.equal(range.status, 206);
  t.equal(range.headers['x-served-by'], 'edge');
});

t.test('HSTS goes over HTTPS only (RFC 6797 §7.2): a plain HTTP answer has the policy\'s other fields but no Strict-Transport-Security', async (t) => {
  await edge.get('/hsts-page', https);
  const plain = await edge.get('/hsts-page');
  t.equal(plain.headers['x-cache-status'], 'HIT');
  t.equal(plain.headers['strict-transport-security'], undefined, 'not over plain HTTP');
  t.equal(plain.headers['x-content-type-options'], 'nosniff', 'the rest of the policy applies');
  t.equal(plain.headers['x-served-by'], 'edge');
  const secure = await edge.get('/hsts-page', https);
  t.equal(secure.headers['strict-transport-security'], 'max-age=63072000; includeSubDomains; preload', 'the same stored object over HTTPS: sent');
  const refused = await rawRequest(edge.port, ['GET /a%2fb HTTP/1.1', `Host: ${HOST}`, 'Connection: close']);
  t.equal(refused.headers['strict-transport-security'], undefined, 'nor on the edge\'s own answers over plain HTTP');
});

t.test('edge answers get the policy too: a refusal after the endpoint is known', async (t) => {
  const r = await rawRequest(edge.port, ['GET /a%2fb HTTP/1.1', `Host: ${HOST}`, 'Connection: close']);
  t.equal(r.status, 400);
  t.equal(r.headers['x-content-type-options'], 'nosniff');
  t.equal(r.headers['x-frame-options'], 'DENY', 'override false fills a missing header');
  t.equal(r.headers.server, 'edge-server');
});

t.test('the route\'s policy wins over the endpoint\'s', async (t) => {
  const r = await edge.get('/api/list', { origin: 'https://app.example' });
  t.equal(r.headers['x-served-by'], 'api-route');
  t.equal(r.headers['strict-transport-security'], undefined, 'the endpoint\'s policy does not add to the route\'s');
  t.equal(r.headers['x-powered-by'], 'php', 'nor remove');
});

t.test('request headers: set, filled, removed before the origin, and the key made of what is forwarded', async (t) => {
  const before = origin.requests.length;
  const a = await edge.get('/keyed/x', { 'x-secret': 'one', 'x-device': 'phone' });
  t.equal(a.body, '/keyed/x device=phone secret=- tenant=acme', 'X-Secret removed, X-Tenant set, X-Device kept (override false)');
  const sent = origin.requests[before];
  t.equal(sent.headers['x-secret'], undefined, 'the removed header never reached the origin');
  t.equal(sent.headers['x-tenant'], 'acme');
  const b = await edge.get('/keyed/x', { 'x-secret': 'two', 'x-device': 'phone' });
  t.equal(b.headers['x-cache-status'], 'HIT', 'a removed header does not split the key: the origin never saw it');
  const c = await edge.get('/keyed/x', { 'x-secret': 'one' });
  t.equal(c.headers['x-cache-status'], 'MISS', 'a filled header is keyed as forwarded (desktop here)');
  t.equal(c.body, '/keyed/x device=desktop secret=- tenant=acme');
  const d = await edge.get('/keyed/x', { 'x-device': 'desktop' });
  t.equal(d.headers['x-cache-status'], 'HIT', 'the same forwarded value, the same object');
  const viewerTenant = await edge.get('/other', { 'x-tenant': 'evil' });
  t.match(viewerTenant.body, /tenant=acme/, 'override true replaces the viewer\'s value');
});

t.test('CORS with listed origins and credentials: the allowed Origin echoed on misses and hits, Vary: Origin everywhere', async (t) => {
  const miss = await edge.get('/api/data', { origin: 'https://app.example' });
  const hit = await edge.get('/api/data', { origin: 'https://a.b.partner.example' });
  const other = await edge.get('/api/data', { origin: 'https://evil.example' });
  const none = await edge.get('/api/data');
  t.equal(hit.headers['x-cache-status'], 'HIT');
  t.equal(miss.headers['access-control-allow-origin'], 'https://app.example');
  t.equal(hit.headers['access-control-allow-origin'], 'https://a.b.partner.example', 'a subdomain pattern');
  t.equal(hit.headers['access-control-allow-credentials'], 'true');
  t.equal(hit.headers['access-control-expose-headers'], 'X-Served-By');
  t.equal(other.headers['access-control-allow-origin'], undefined, 'an origin not listed gets no CORS fields');
  t.equal(none.headers['access-control-allow-origin'], undefined);
  for (const r of [miss, hit, other, none]) t.match(r.headers.vary, /Origin/);
  t.equal((await edge.get('/api/data', { origin: 'https://partner.example' })).headers['access-control-allow-origin'], undefined, '*. needs a subdomain');
});

t.test('a preflight is answered at the edge and never reaches the origin', async (t) => {
  const before = origin.requests.length;
  const ok = await edge.get('/api/data', { origin: 'https://app.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'x-token, content-type' }, 'OPTIONS');
  t.equal(ok.status, 204);
  t.equal(ok.headers['access-control-allow-origin'], 'https://app.example');
  t.equal(ok.headers['access-control-allow-credentials'], 'true');
  t.equal(ok.headers['access-control-allow-methods'], 'GET, PUT');
  t.equal(ok.headers['access-control-allow-headers'], 'x-token, content-type');
  t.equal(ok.headers['access-control-max-age'], '600');
  t.match(ok.headers.vary, /Origin/);
  const method = await edge.get('/api/data', { origin: 'https://app.example', 'access-control-request-method': 'DELETE' }, 'OPTIONS');
  t.equal(method.status, 403, 'a method not allowed');
  const header = await edge.get('/api/data', { origin: 'https://app.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'x-other' }, 'OPTIONS');
  t.equal(header.status, 403, 'a header not allowed');
  const stranger = await edge.get('/api/data', { origin: 'https://evil.example', 'access-control-request-method': 'GET' }, 'OPTIONS');
  t.equal(stranger.status, 403);
  t.equal(stranger.headers['access-control-allow-origin'], undefined);
  t.equal(origin.requests.length, before, 'the origin saw none of them');
  const plain = await edge.get('/api/data', {}, 'OPTIONS');
  t.equal(plain.status, 200, 'an OPTIONS that is not a preflight goes to the origin');
  t.equal(origin.requests.length, before + 1);
});

t.test('CORS for any origin is the same on every answer; override_origin false keeps the origin\'s CORS answer', async (t) => {
  const open = await edge.get('/open/x');
  t.equal(open.headers['access-control-allow-origin'], '*');
  t.equal(open.headers['access-control-expose-headers'], 'ETag');
  t.notMatch(open.headers.vary ?? '', /Origin/, 'no Vary: Origin when the answer does not depend on it');
  const preflight = await edge.get('/open/x', { origin: 'https://anyone.example', 'access-control-request-method': 'GET' }, 'OPTIONS');
  t.equal(preflight.status, 204);
  t.equal(preflight.headers['access-control-allow-methods'], 'GET, HEAD', 'allow_methods defaults to GET and HEAD');
  t.equal(preflight.headers['access-control-allow-origin'], '*');
  const kept = await edge.get('/cors-origin/x', { origin: 'https://app.example' });
  t.equal(kept.headers['access-control-allow-origin'], 'https://origin-says.example', 'the origin\'s value stands');
});
