// Regression tests for the inputs an outside attack turned into 500s, the
// case-insensitive routing that let `/V1/` skip the per-client budget, and the
// slow header senders the control plane kept for minutes. (The raw
// /docs/../package.json check is in system-endpoints.test.ts.) Each is fixed in
// the shared layer (validation, paging, router, server), not per route.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createLoggedInUser, createSuperadmin, PASSWORD, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { trickle } from '../../../test/support/raw-http.ts';

const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, HEADERS_TIMEOUT_MS: '1000' } });
const admin = await createSuperadmin(cp);
const user = await createLoggedInUser(cp);
const asAdmin = () => bearer(admin.accessToken);
const cursorOf = (data: unknown) => Buffer.from(JSON.stringify(data)).toString('base64url');
const userRow = async (id: string) => (await query(cp, 'select * from app_user where id = ?', [id]))[0]!;

t.test('regression: NUL in a string field gave 500; now 400 naming the field, nothing stored', async (t) => {
  const target = await createLoggedInUser(cp);
  const before = await userRow(user.id);
  const cases: [string, string, Record<string, string>, unknown, string][] = [
    ['PATCH', '/v1/users/me', bearer(user.accessToken), { display_name: 'Ada\u0000Lovelace' }, 'display_name'],
    ['POST', `/v1/admin/users/${target.id}/suspend`, asAdmin(), { reason: 'spam\u0000' }, 'reason'],
    ['POST', `/v1/admin/users/${target.id}/reinstate`, asAdmin(), { note: '\u0000' }, 'note'],
    ['POST', '/v1/auth/login', {}, { email: user.email, password: PASSWORD, platform: 'tv\u0000os' }, 'platform'],
    ['POST', '/v1/auth/register', {}, { email: 'nul@example.com', password: PASSWORD, accept_terms: true, display_name: 'x\u0000' }, 'display_name'],
  ];
  for (const [method, path, headers, json, field] of cases) {
    const res = await cp.request(method, path, { headers, json });
    t.equal(res.status, 400, `${method} ${path}`);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), `${path}: ${JSON.stringify(res.body.errors)}`);
  }
  const q = await cp.request('GET', `/v1/admin/users?q=${encodeURIComponent('a\u0000b')}`, { headers: asAdmin() });
  t.equal(q.status, 400);
  t.equal(q.body.errors[0].field, 'q');
  t.same(await userRow(user.id), before, 'the user row is unchanged');
  t.equal((await userRow(target.id)).status, 'active', 'the target was not suspended');
  t.equal((await query(cp, `select count(*)::int as n from app_user where email = 'nul@example.com'`))[0]!.n, 0);
});

t.test('control characters, broken Unicode and unsafe keys are refused everywhere', async (t) => {
  for (const [what, json, field] of [
    ['an escape character', { display_name: 'a\u001bb' }, 'display_name'],
    ['a C1 control', { display_name: 'a\u0085b' }, 'display_name'],
    ['a lone surrogate', { display_name: 'a\ud800b' }, 'display_name'],
    ['a line break in a single-line field', { display_name: 'a\nb' }, 'display_name'],
    ['a NUL inside a field name', { ['x\u0000']: 1 }, '"x\\u0000"'],
  ] as const) {
    const res = await cp.request('PATCH', '/v1/users/me', { headers: bearer(user.accessToken), json });
    t.equal(res.status, 400, what);
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), `${what}: ${JSON.stringify(res.body.errors)}`);
  }
  const path = await cp.request('GET', '/v1/admin/users/%00', { headers: asAdmin() });
  t.equal(path.status, 400, 'a NUL in a path parameter');
  t.equal(path.body.errors[0].field, 'user_id');
});

t.test('regression: a tampered cursor with values of the wrong type gave 500; now 400 on cursor', async (t) => {
  const cursors = [
    cursorOf({ s: '-created_at', v: 12, id: crypto.randomUUID(), d: 'n' }),
    cursorOf({ s: '-created_at', v: '2026-01-01T00:00:00.000Z', t: 'd', id: 'not-a-uuid', d: 'n' }),
    cursorOf({ s: '-created_at', v: '2026-01-01T00:00:00.000Z', t: 'd', id: 42, d: 'n' }),
    cursorOf({ s: '-created_at', v: '0000-01-01T00:00:00.000Z', t: 'd', id: crypto.randomUUID(), d: 'n' }),
    cursorOf({ s: '-created_at', v: { $gt: 1 }, id: crypto.randomUUID(), d: 'n' }),
    cursorOf({ s: 'email', v: 5, id: crypto.randomUUID(), d: 'n' }),
    cursorOf({ s: 'email', v: 'x'.repeat(300), id: crypto.randomUUID(), d: 'n' }),
    cursorOf([1, 2]),
    cursorOf(null),
    'not base64 at all!',
  ];
  for (const [i, cursor] of cursors.entries()) {
    const sort = i >= 5 && i <= 6 ? '&sort=email' : '';
    const res = await cp.request('GET', `/v1/admin/users?cursor=${encodeURIComponent(cursor)}${sort}`, { headers: asAdmin() });
    t.equal(res.status, 400, `cursor ${i}`);
    t.equal(res.body.errors?.[0]?.field, 'cursor', `cursor ${i}`);
  }
  // A genuine cursor still pages.
  const first = await cp.request('GET', '/v1/admin/users?limit=1&sort=email', { headers: asAdmin() });
  const next = await cp.request('GET', `/v1/admin/users?limit=1&sort=email&cursor=${first.body.meta.next_cursor}`, { headers: asAdmin() });
  t.equal(next.status, 200);
  t.not(next.body.data[0].id, first.body.data[0].id);
});

t.test('regression: created_after=0000-01-01 gave 500; dates outside 0001..9999 are 400', async (t) => {
  for (const value of ['0000-01-01T00:00:00Z', '-000001-01-01T00:00:00Z', '+010000-01-01T00:00:00Z']) {
    const res = await cp.request('GET', `/v1/admin/users?created_after=${encodeURIComponent(value)}`, { headers: asAdmin() });
    t.equal(res.status, 400, value);
    t.equal(res.body.errors[0].field, 'created_after');
  }
  for (const value of ['0001-01-01T00:00:00Z', '9999-12-31T23:59:59Z']) {
    t.equal((await cp.request('GET', `/v1/admin/users?created_after=${encodeURIComponent(value)}`, { headers: asAdmin() })).status, 200, value);
  }
});

t.test('operations without a query or body schema refuse unknown query fields and a body', async (t) => {
  const res = await cp.request('GET', '/v1/users/me?debug=1', { headers: bearer(user.accessToken) });
  t.equal(res.status, 400);
  t.equal(res.body.errors[0].field, 'debug');
  const logout = await cp.request('POST', '/v1/auth/logout', { headers: bearer(user.accessToken), json: { everywhere: true } });
  t.equal(logout.status, 400, 'a body on a body-less action');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(user.accessToken) })).status, 200, 'still logged in');
});

t.test('regression: /V1/ bypassed the per-address limit; routing is case-sensitive', async (t) => {
  const limited = await startTestControlPlane(t, { env: { RATE_LIMIT_PER_MINUTE: '3' } });
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await limited.request('POST', '/v1/auth/login', { json: { email: 'x@example.com', password: 'whatever' } })).status);
  t.same(statuses, [401, 401, 401, 429], 'the fourth request in the minute is refused');
  const upper = await cp.request('POST', '/V1/auth/login', { json: { email: 'x@example.com', password: 'whatever' } });
  t.equal(upper.status, 404, '/V1/ is no route');
  t.equal(upper.body.code, 'NOT_FOUND');
  t.equal((await limited.request('POST', '/V1/auth/login', { json: { email: 'x@example.com', password: 'whatever' } })).status, 429, 'and spends the budget like any path');
  t.equal((await cp.request('GET', '/v1/users/ME', { headers: bearer(user.accessToken) })).status, 404);
});

t.test('regression: a body nested 20,000 levels deep overflowed the stack (500 before authentication); refused with 400 naming the limit', async (t) => {
  const deep = (levels: number) => '{"a":'.repeat(levels) + '1' + '}'.repeat(levels);
  const arrays = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);
  const routes: [string, string, Record<string, string>][] = [
    ['POST', '/v1/auth/login', {}],
    ['POST', '/v1/auth/register', {}],
    ['POST', '/v1/auth/password/forgot', {}],
    ['PATCH', '/v1/users/me', bearer(user.accessToken)],
    ['POST', '/v1/admin/plans', asAdmin()],
  ];
  for (const [method, path, headers] of routes) {
    for (const body of [deep(20_000), deep(100_000), arrays(100_000), deep(65)]) {
      const res = await cp.request(method, path, { headers: { ...headers, 'content-type': 'application/json' }, body });
      t.equal(res.status, 400, `${method} ${path}, ${body.length} bytes`);
      t.equal(res.body.code, 'VALIDATION_ERROR');
      t.match(res.body.message, /nested deeper than 64 levels/);
      t.same(res.body.errors, [{ field: '(body)', message: 'Objects and arrays may be nested at most 64 levels deep' }]);
    }
  }
  // 64 levels is within the limit: the body reaches validation, which names the unknown field.
  const within = await cp.request('POST', '/v1/auth/login', { headers: { 'content-type': 'application/json' }, body: deep(64) });
  t.equal(within.status, 400);
  t.equal(within.body.message, 'One or more fields failed validation');
  t.ok(within.body.errors.some((e: { field: string }) => e.field === 'a'), JSON.stringify(within.body.errors));
  // Brackets inside strings are text, not nesting.
  const text = await cp.request('PATCH', '/v1/users/me', { headers: bearer(user.accessToken), json: { display_name: '['.repeat(80) } });
  t.equal(text.status, 200, 'a string of 80 brackets is a string');
});

t.test('regression: validation errors were unbounded (8.2 MB for 100,000 NUL strings); at most 50 entries and the count of the rest', async (t) => {
  const strings = Array.from({ length: 100_000 }, () => '\u0000');
  const res = await cp.request('POST', '/v1/auth/login', { json: { email: 'x@example.com', password: 'x', extra: strings } });
  t.equal(res.status, 400);
  t.equal(res.body.errors.length, 50);
  t.equal(res.body.errors_omitted, 99_950);
  t.same(res.body.errors[0], { field: 'extra[0]', message: 'Must not contain control characters such as NUL' });
  t.equal(res.body.errors[49].field, 'extra[49]', 'the first 50, in order');
  t.ok(res.text.length < 10_000, `${res.text.length} bytes`);
  // Schema errors are capped the same way; a short list carries no count.
  const many = await cp.request('PATCH', '/v1/users/me', { headers: bearer(user.accessToken), json: Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`unknown_${i}`, 1])) });
  t.equal(many.status, 400);
  t.equal(many.body.errors.length, 50);
  t.equal(many.body.errors_omitted, 70);
  const few = await cp.request('PATCH', '/v1/users/me', { headers: bearer(user.accessToken), json: { unknown: 1 } });
  t.equal(few.body.errors.length, 1);
  t.notOk('errors_omitted' in few.body);
});

t.test('regression: percent-encoded spellings of /v1 skipped the per-address limit; the matched route decides', async (t) => {
  const spellings = ['/%761/plans', '/v%31/plans', '/%76%31/plans', '/v1/%70lans', '/%76%31/%70%6C%61%6E%73', '/v%31/%70%6c%61%6e%73'];
  const limited = await startTestControlPlane(t, { env: { RATE_LIMIT_PER_MINUTE: String(spellings.length + 1) } });
  const remaining: string[] = [];
  for (const path of ['/v1/plans', ...spellings]) {
    const res = await limited.request('GET', path);
    t.equal(res.status, 200, `${path} reaches GET /v1/plans`);
    remaining.push(res.headers.get('ratelimit-remaining') ?? 'none');
  }
  t.same(remaining, Array.from({ length: spellings.length + 1 }, (_, i) => String(spellings.length - i)), 'each spelling spent the budget');
  for (const path of ['/v1/plans', ...spellings]) {
    const res = await limited.request('GET', path);
    t.equal(res.status, 429, `${path} once the budget is spent`);
    t.ok(Number(res.headers.get('retry-after')) >= 1);
  }
  t.equal((await limited.request('GET', '/%76%31/nothing-here')).status, 429, 'an unknown path spends the budget too');
  t.equal((await limited.request('GET', '/v1/cdn/health/ready')).status < 429, true, 'readiness is outside the budget');
  t.equal((await limited.request('GET', '/healthz')).status, 200, 'system endpoints are outside the budget');
});

t.test('regression: a subscriber\'s invalid body on an admin route got 400 with the schema\'s messages; authorization comes first', async (t) => {
  const invalid = { name: '', price: -1, bogus: true };
  const asSubscriber = await cp.request('POST', '/v1/admin/plans', { headers: bearer(user.accessToken), json: invalid });
  t.equal(asSubscriber.status, 403, 'refused for who the caller is');
  t.equal(asSubscriber.body.code, 'FORBIDDEN');
  t.notOk(asSubscriber.body.errors, 'nothing about the schema');
  const anonymous = await cp.request('POST', '/v1/admin/plans', { json: invalid });
  t.equal(anonymous.status, 401);
  const asAdminRes = await cp.request('POST', '/v1/admin/plans', { headers: asAdmin(), json: invalid });
  t.equal(asAdminRes.status, 400, 'a caller who may is told what is wrong');
  t.ok(asAdminRes.body.errors.some((e: { field: string }) => e.field === 'bogus'));
  const query = await cp.request('GET', '/v1/admin/users?status=nonsense', { headers: bearer(user.accessToken) });
  t.equal(query.status, 403, 'a bad query from a caller who may not list users');
});

t.test('a wrong method on a known path is 405 with Allow', async (t) => {
  const res = await cp.request('PUT', '/v1/users/me', { headers: bearer(user.accessToken), json: {} });
  t.equal(res.status, 405);
  t.equal(res.body.code, 'METHOD_NOT_ALLOWED');
  t.match(res.headers.get('allow'), /GET/);
  t.match(res.headers.get('allow'), /PATCH/);
});

t.test('regression: slow header senders were kept for minutes; the header timeout cuts them off', async (t) => {
  // HEADERS_TIMEOUT_MS is 1000 here; the connection check runs at least that often.
  const slow = await trickle(cp.url, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(200), 200, 10_000);
  t.ok(slow.closedAfterMs < 5_000, `closed after ${Math.round(slow.closedAfterMs)} ms`);
  t.match(slow.answer, /^HTTP\/1\.1 408/, 'answered 408 Request Timeout');
  t.equal((await cp.request('GET', '/healthz')).status, 200, 'others are served');
});
