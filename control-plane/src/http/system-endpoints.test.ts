import t from 'tap';
import { rawRequest } from '../../../test/support/raw-http.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { widgetRoutes } from '../../../test/support/widgets-fixture.ts';

const cp = await startTestControlPlane(t, { extraRoutes: widgetRoutes });

t.test('every response carries X-Request-Id; a sane incoming one is echoed', async (t) => {
  const generated = await cp.request('GET', '/healthz');
  t.match(generated.headers.get('x-request-id'), /^[0-9a-f-]{36}$/);
  const echoed = await cp.request('GET', '/v1/nope', { headers: { 'x-request-id': 'client-abc.123' } });
  t.equal(echoed.headers.get('x-request-id'), 'client-abc.123');
  t.equal(echoed.body.request_id, 'client-abc.123', 'in the error body too');
  const hostile = await cp.request('GET', '/healthz', { headers: { 'x-request-id': 'bad id with spaces<script>' } });
  t.not(hostile.headers.get('x-request-id'), 'bad id with spaces<script>', 'unsafe ids are replaced');
});

t.test('unknown routes get 404 NOT_FOUND, wrong methods 405', async (t) => {
  const missing = await cp.request('GET', '/v1/does-not-exist');
  t.equal(missing.status, 404);
  t.same(Object.keys(missing.body).sort(), ['code', 'message', 'request_id']);
  t.equal(missing.body.code, 'NOT_FOUND');
  const wrongMethod = await cp.request('DELETE', '/v1/cdn/health/ready');
  t.equal(wrongMethod.status, 405);
  t.equal(wrongMethod.body.code, 'METHOD_NOT_ALLOWED');
});

t.test('security headers are set on API responses', async (t) => {
  const res = await cp.request('GET', '/v1/cdn/health/ready');
  t.equal(res.headers.get('x-content-type-options'), 'nosniff');
  t.equal(res.headers.get('cache-control'), 'no-store');
  t.notOk(res.headers.get('x-powered-by'));
});

t.test('/openapi.json is OpenAPI 3.1 generated from the route schemas', async (t) => {
  const res = await cp.request('GET', '/openapi.json');
  t.equal(res.status, 200);
  t.equal(res.body.openapi, '3.1.0');
  const list = res.body.paths['/v1/test/widgets'].get;
  t.ok(list.parameters.some((p: any) => p.name === 'limit' && p.in === 'query' && p.schema.maximum === 100));
  const create = res.body.paths['/v1/test/widgets'].post;
  const schema = create.requestBody.content['application/json'].schema;
  t.equal(schema.properties.name.maxLength, 20);
  t.equal(schema.additionalProperties, false, 'unknown fields refused in the contract too');
  t.ok(create.parameters.some((p: any) => p.name === 'Idempotency-Key'));
  t.ok(res.body.paths['/v1/test/widgets/{id}'].patch.parameters.some((p: any) => p.name === 'If-Match'));
  t.ok(res.body.paths['/v1/test/widgets/{id}'].patch.responses['412']);
  t.ok(res.body.paths['/v1/cdn/health/ready'].get.responses['503']);
});

t.test('/docs serves the interactive reference with its assets', async (t) => {
  const page = await cp.request('GET', '/docs');
  t.equal(page.status, 200);
  t.match(page.text, /swagger-ui/);
  const bundle = await cp.request('GET', '/docs/swagger-ui-bundle.js');
  t.equal(bundle.status, 200);
  t.ok(bundle.text.length > 100_000);
  // Sent raw: fetch would remove the dot segment before sending, and the check could not fail.
  for (const target of ['/docs/../package.json', '/docs/%2e%2e/package.json', '/docs/..%2fpackage.json']) {
    const res = await rawRequest(cp.url, `GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
    t.equal(res.status, 404, target);
    t.notMatch(res.body, /"dependencies"/, `${target}: package.json not served`);
  }
});

t.test('/metrics exposes process metrics and the request histogram by route', async (t) => {
  await cp.request('GET', `/v1/test/widgets/${crypto.randomUUID()}`);
  const res = await cp.request('GET', '/metrics');
  t.equal(res.status, 200);
  t.match(res.text, /process_cpu_user_seconds_total/);
  t.match(res.text, /http_request_duration_seconds_bucket\{.*route="\/v1\/test\/widgets\/:id".*\}/);
});

t.test('/healthz answers 200', async (t) => {
  const res = await cp.request('GET', '/healthz');
  t.equal(res.status, 200);
  t.same(res.body, { status: 'ok' });
});
