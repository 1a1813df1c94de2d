// Edge response shaping configured through the control plane (issue 22, item
// 2): a control-plane process on PostgreSQL, an edge-agent process connected
// to it over the control channel, and a real origin. A response headers
// policy (created for the distribution, so it becomes the endpoint's),
// compression and a custom error page are set through the CDN API and
// published; a policy the edge could not send is refused with 422 and
// changes nothing. Viewers' requests to the agent then show: a CORS preflight
// answered at the edge, override false keeping the origin's header, gzip, br
// and identity stored separately (one origin fetch, three cached objects) and
// a range served from the identity, the error page kept for its TTL, and a
// removed request header that never reaches the origin.
import http from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { eventually } from '../support/eventually.ts';
import { agentHealth, agentMetrics, metricSum, startDeployment, startEdgeAgent } from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const page = '<!doctype html><title>Catalogue</title>' + '<li>An episode worth watching</li>'.repeat(120);

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('edge response shaping through the control plane', { timeout: 240_000 }, (tt) => run(tt, postgresUrl));
}

async function run(t: Test, postgresUrl: string) {
  let errorPageVersion = 1;
  const received: http.IncomingHttpHeaders[] = [];
  const fetches = new Map<string, number>();
  const origin = http.createServer((req, res) => {
    // Health probes (to the origin's root, every 30 s) are no viewer's request.
    if (req.headers['user-agent'] !== 'edge-agent-health/1') received.push(req.headers);
    fetches.set(req.url!, (fetches.get(req.url!) ?? 0) + 1);
    if (req.url === '/errors/404.html') return res.writeHead(200, { 'content-type': 'text/html' }).end(`<h1>Not found (v${errorPageVersion})</h1>`);
    if (req.url!.startsWith('/missing')) return res.writeHead(404, { 'content-type': 'text/plain' }).end('origin 404');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'public, max-age=300', etag: '"cat-7"', 'x-frame-options': 'SAMEORIGIN' });
    res.end(page);
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { origin.closeAllConnections(); origin.close(() => resolve()); }));
  const originPort = (origin.address() as { port: number }).port;

  const deployment = await startDeployment(t, { postgresUrl });
  const { must, api } = deployment;
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-shaping');

  const o = await must('POST', '/v1/cdn/origins', { name: 'catalogue origin', scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true, max_retries: 0 });
  const endpoint = await must('POST', '/v1/cdn/endpoints', {
    name: 'catalogue', default_origin_id: o.id,
    compression: { enabled: true, min_size_bytes: 256 },
    custom_error_pages: [{ error_code: 404, response_page_path: '/errors/404.html', ttl_seconds: 2 }],
  });
  const policy = await must('POST', `/v1/cdn/distributions/${endpoint.id}/response-headers-policies`, {
    name: 'catalogue headers',
    cors: { enabled: true, allow_origins: ['https://app.example'], allow_methods: ['GET', 'PUT'], allow_headers: ['X-Token'], max_age_seconds: 600 },
    security_headers: { x_frame_options: { enabled: true, value: 'DENY', override: false }, x_content_type_options: { enabled: true } },
    custom_response_headers: [{ name: 'X-Served-By', value: 'edge' }],
    remove_request_headers: ['X-Secret'],
  });
  t.equal((await must('GET', `/v1/cdn/endpoints/${endpoint.id}`)).response_headers_policy_id, policy.id, 'the new policy is the endpoint\'s');

  const refused = await api('PATCH', `/v1/cdn/response-headers-policies/${policy.id}`, { cors: { allow_credentials: true, allow_origins: ['*'] } });
  t.equal(refused.status, 422, 'credentials with "*": the edge could not send it');
  t.equal(refused.body.errors[0].field, 'cors.allow_credentials');
  t.same((await must('GET', `/v1/cdn/response-headers-policies/${policy.id}`)).cors.allow_origins, ['https://app.example'], 'nothing changed');

  const version = await must('POST', '/v1/cdn/config/publish', { description: 'response shaping' });
  await eventually(async () => (await agentHealth(agent)).config_version === version.version_number, 'the agent applies the published version');

  const host = endpoint.hostname as string;
  const get = async (path: string, headers: Record<string, string> = {}, method = 'GET') => {
    const res = await request(`http://127.0.0.1:${agent.port}${path}`, { method: method as 'GET', headers: { host, ...headers }, headersTimeout: 10_000, bodyTimeout: 10_000 });
    const body = Buffer.from(await res.body.arrayBuffer());
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: res.statusCode, headers: h, body };
  };

  t.test('a CORS preflight is answered at the edge', async (t) => {
    const before = received.length;
    const ok = await get('/catalogue', { origin: 'https://app.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'X-Token' }, 'OPTIONS');
    t.equal(ok.status, 204);
    t.equal(ok.headers['access-control-allow-origin'], 'https://app.example');
    t.equal(ok.headers['access-control-allow-methods'], 'GET, PUT');
    t.equal(ok.headers['access-control-max-age'], '600');
    t.equal((await get('/catalogue', { origin: 'https://elsewhere.example', 'access-control-request-method': 'GET' }, 'OPTIONS')).status, 403);
    t.equal(received.length, before, 'the origin saw no preflight');
  });

  t.test('override false keeps the origin\'s header; custom and security headers are added', async (t) => {
    const r = await get('/catalogue', { origin: 'https://app.example' });
    t.equal(r.status, 200);
    t.equal(r.headers['x-frame-options'], 'SAMEORIGIN');
    t.equal(r.headers['x-content-type-options'], 'nosniff');
    t.equal(r.headers['x-served-by'], 'edge');
    t.equal(r.headers['access-control-allow-origin'], 'https://app.example');
  });

  t.test('gzip, br and identity are stored separately; a range is answered from the identity', async (t) => {
    // Counted as the memory tier stores them (the node tier's count trails its writes by a commit).
    const stored = async () => metricSum(await agentMetrics(agent), 'edge_cache_tier_fills_total', { tier: 'memory' });
    const before = await stored();
    const gz = await get('/episodes', { 'accept-encoding': 'gzip' });
    const br = await get('/episodes', { 'accept-encoding': 'gzip;q=0.5, br' });
    const plain = await get('/episodes');
    t.equal(gunzipSync(gz.body).toString(), page);
    t.equal(brotliDecompressSync(br.body).toString(), page);
    t.equal(plain.body.toString(), page);
    t.same([gz.headers['content-encoding'], br.headers['content-encoding'], plain.headers['content-encoding']], ['gzip', 'br', undefined]);
    t.same([gz.headers.etag, br.headers.etag, plain.headers.etag], ['"cat-7-gzip"', '"cat-7-br"', '"cat-7"']);
    t.equal(fetches.get('/episodes'), 1, 'one origin fetch');
    t.equal(await stored(), before + 3, 'three objects stored in the agent\'s cache');
    t.equal((await get('/episodes', { 'accept-encoding': 'br' })).headers['x-cache-status'], 'HIT');
    const range = await get('/episodes', { 'accept-encoding': 'gzip, br', range: 'bytes=9-29' });
    t.equal(range.status, 206);
    t.equal(range.headers['content-encoding'], undefined);
    t.equal(range.body.toString(), page.slice(9, 30));
  });

  t.test('the custom error page is served, kept for its TTL, then fetched again', async (t) => {
    const first = await get('/missing/1');
    t.equal(first.status, 404);
    t.equal(first.body.toString(), '<h1>Not found (v1)</h1>');
    t.equal(first.headers['x-served-by'], 'edge', 'the header policy applies to the page');
    errorPageVersion = 2;
    t.equal((await get('/missing/2')).body.toString(), '<h1>Not found (v1)</h1>', 'kept within ttl_seconds');
    t.equal(fetches.get('/errors/404.html'), 1);
    await new Promise((r) => setTimeout(r, 2100)); // ttl_seconds is 2: the page has to age past it
    t.equal((await get('/missing/3')).body.toString(), '<h1>Not found (v2)</h1>');
    t.equal(fetches.get('/errors/404.html'), 2);
  });

  t.test('a removed request header never reaches the origin', async (t) => {
    const before = received.length;
    await get('/account', { 'x-secret': 'viewer-only', 'x-kept': 'yes' });
    const sent = received.slice(before);
    t.equal(sent.length, 1);
    t.equal(sent[0]['x-secret'], undefined);
    t.equal(sent[0]['x-kept'], 'yes');
  });
}
