// The request examples /docs prefills ("Try it out") are real requests: each
// declared example passes its own route's body schema, every common create
// declares one, and sending the examples as /openapi.json gives them (with a
// valid token, and the ids of other resources replaced by the caller's own, as
// a user does) succeeds.
import t, { type Test } from 'tap';
import { routes } from '../../control-plane/src/capabilities.ts';
import { createSuperadmin, login, PASSWORD, sender, verifyEmail } from '../support/auth.ts';
import { noDnsAnswers } from '../support/cdn.ts';
import { startTestControlPlane } from '../support/control-plane.ts';

type Operation = { requestBody?: { content: Record<string, { example?: Record<string, unknown> }> } };

const cp = await startTestControlPlane(t, { services: noDnsAnswers });
const doc = (await cp.request('GET', '/openapi.json')).body as { paths: Record<string, Record<string, Operation>>; servers: { url: string }[] };
const send = sender(cp);

/** The example "Try it out" prefills for an operation (its JSON media type's example). */
function example(method: string, path: string): Record<string, unknown> {
  const found = doc.paths[path]?.[method.toLowerCase()]?.requestBody?.content['application/json']?.example;
  if (!found) throw new Error(`${method} ${path} declares no request example`);
  return structuredClone(found);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The example with the ids of other resources replaced, as a user fills them in; each replaced field must hold an example UUID. */
function filled(t: Test, method: string, path: string, ids: Record<string, string> = {}): Record<string, unknown> {
  const body = example(method, path);
  for (const [field, id] of Object.entries(ids)) {
    t.match(body[field], UUID, `${method} ${path}: ${field} is an example id to replace`);
    body[field] = id;
  }
  return body;
}

t.test('/docs calls the server it was read from first ("Try it out" stays on the page\'s origin)', async (t) => {
  t.equal(doc.servers[0]!.url, '/');
});

t.test('every declared example passes its own route\'s body schema', async (t) => {
  let count = 0;
  for (const route of routes) {
    const path = route.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const declared = doc.paths[path]?.[route.method]?.requestBody?.content['application/json']?.example;
    if (declared === undefined) continue;
    count++;
    const parsed = route.body!.safeParse(declared);
    t.ok(parsed.success, `${route.method.toUpperCase()} ${route.path}${parsed.success ? '' : `: ${parsed.error.message}`}`);
  }
  t.ok(count >= 25, `${count} operations declare an example`);
});

t.test('the examples of the common creates, sent as given, succeed', async (t) => {
  const expect = (res: { status: number; text: string }, status: number, what: string) => {
    t.equal(res.status, status, `${what}: ${res.status === status ? 'ok' : res.text}`);
    return res;
  };

  // Authentication: register, confirm the address, sign in, ask for a reset link.
  const registration = example('POST', '/v1/auth/register');
  expect(await send(null, 'POST', '/v1/auth/register', registration), 201, 'register');
  await verifyEmail(cp, registration.email as string, registration.password as string);
  const signIn = example('POST', '/v1/auth/login');
  t.same([signIn.email, signIn.password], [registration.email, registration.password], 'the login example signs in the registered example account');
  const loggedIn = expect(await send(null, 'POST', '/v1/auth/login', signIn), 200, 'login') as { body: { data: { access_token: string } } } & { status: number; text: string };
  const subscriber = loggedIn.body.data.access_token;
  expect(await send(null, 'POST', '/v1/auth/password/forgot', example('POST', '/v1/auth/password/forgot')), 200, 'forgot password');

  // A payment method; billing administration: a plan (then replaced by PUT), a coupon, a gift card; the subscriber subscribes
  // with the coupon, and the plan's profiles allow a second one.
  const card = expect(await send(subscriber, 'POST', '/v1/payment-methods', example('POST', '/v1/payment-methods')), 201, 'attach payment method') as any;
  const admin = await createSuperadmin(cp);
  const plan = expect(await send(admin, 'POST', '/v1/admin/plans', example('POST', '/v1/admin/plans')), 201, 'create plan') as any;
  expect(await send(admin, 'PUT', `/v1/admin/plans/${plan.body.data.id}`, example('PUT', '/v1/admin/plans/{plan_id}')), 200, 'replace plan');
  expect(await send(admin, 'POST', '/v1/admin/coupons', example('POST', '/v1/admin/coupons')), 201, 'create coupon');
  expect(await send(admin, 'POST', '/v1/admin/gift-cards', example('POST', '/v1/admin/gift-cards')), 201, 'create gift card');
  expect(await send(subscriber, 'POST', '/v1/subscriptions',
    filled(t, 'POST', '/v1/subscriptions', { plan_id: plan.body.data.id, payment_method_id: card.body.data.id })), 201, 'subscribe with the coupon');
  expect(await send(subscriber, 'POST', '/v1/users/me/profiles', example('POST', '/v1/users/me/profiles')), 201, 'create profile');

  // CDN: an origin, the endpoint using it, and what hangs off the endpoint.
  const origin = expect(await send(admin, 'POST', '/v1/cdn/origins', example('POST', '/v1/cdn/origins')), 201, 'create origin') as any;
  expect(await send(admin, 'PATCH', `/v1/cdn/origins/${origin.body.id}`, example('PATCH', '/v1/cdn/origins/{id}')), 200, 'update origin');
  const endpoint = expect(await send(admin, 'POST', '/v1/cdn/endpoints',
    filled(t, 'POST', '/v1/cdn/endpoints', { default_origin_id: origin.body.id })), 201, 'create endpoint') as any;
  const id = endpoint.body.id as string;
  expect(await send(admin, 'PATCH', `/v1/cdn/endpoints/${id}`, example('PATCH', '/v1/cdn/endpoints/{id}')), 200, 'update endpoint');
  const route = expect(await send(admin, 'POST', `/v1/cdn/distributions/${id}/routes`,
    filled(t, 'POST', '/v1/cdn/distributions/{id}/routes', { origin_id: origin.body.id })), 201, 'create route') as any;
  expect(await send(admin, 'PATCH', `/v1/cdn/routes/${route.body.id}`, example('PATCH', '/v1/cdn/routes/{id}')), 200, 'update route');
  const rule = expect(await send(admin, 'POST', '/v1/cdn/cache-rules',
    filled(t, 'POST', '/v1/cdn/cache-rules', { distribution_id: id })), 201, 'create cache rule') as any;
  expect(await send(admin, 'PATCH', `/v1/cdn/cache-rules/${rule.body.id}`, example('PATCH', '/v1/cdn/cache-rules/{id}')), 200, 'update cache rule');
  const policy = expect(await send(admin, 'POST', '/v1/cdn/response-headers-policies', example('POST', '/v1/cdn/response-headers-policies')), 201, 'create headers policy') as any;
  expect(await send(admin, 'PATCH', `/v1/cdn/response-headers-policies/${policy.body.id}`, example('PATCH', '/v1/cdn/response-headers-policies/{id}')), 200, 'update headers policy');
  expect(await send(admin, 'POST', `/v1/cdn/endpoints/${id}/ip-rules`, example('POST', '/v1/cdn/endpoints/{id}/ip-rules')), 201, 'create IP rule');
  expect(await send(admin, 'POST', `/v1/cdn/endpoints/${id}/signing-keys`, example('POST', '/v1/cdn/endpoints/{id}/signing-keys')), 201, 'create signing key');
  const purged = await send(admin, 'POST', `/v1/cdn/endpoints/${id}/purge`, example('POST', '/v1/cdn/endpoints/{id}/purge'));
  t.ok(purged.status === 201 || purged.status === 202, `purge an endpoint: ${purged.status} ${purged.text}`);
  const purgedTop = await send(admin, 'POST', '/v1/cdn/cache/purge', filled(t, 'POST', '/v1/cdn/cache/purge', { distribution_id: id }));
  t.ok(purgedTop.status === 201 || purgedTop.status === 202, `purge (top level): ${purgedTop.status} ${purgedTop.text}`);
  expect(await send(admin, 'POST', '/v1/cdn/log-drains', example('POST', '/v1/cdn/log-drains')), 201, 'create log drain');
  expect(await send(admin, 'POST', '/v1/cdn/api-tokens', example('POST', '/v1/cdn/api-tokens')), 201, 'create API token');
  expect(await send(admin, 'POST', '/v1/cdn/admin/users', example('POST', '/v1/cdn/admin/users')), 201, 'invite a CDN admin user');

  // The account example's password is the example's, not the suite's: the login above proved it; the suite's does not open it.
  t.not(registration.password, PASSWORD);
  await t.rejects(login(cp, registration.email as string, PASSWORD));
});
