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
  const upper = await limited.request('POST', '/V1/auth/login', { json: { email: 'x@example.com', password: 'whatever' } });
  t.equal(upper.status, 404, '/V1/ is no route');
  t.equal(upper.body.code, 'NOT_FOUND');
  t.equal((await cp.request('GET', '/v1/users/ME', { headers: bearer(user.accessToken) })).status, 404);
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
