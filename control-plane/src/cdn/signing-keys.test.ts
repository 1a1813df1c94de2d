// Signing keys through the real server (document 3 §2, §3, §4.8): create with
// a given or generated secret shown once, reads and lists without it, rotate
// with a grace period (the sweep drops the old secret after it), delete and
// the last-key refusal under token authentication, distribution aliases,
// roles, idempotency, and no secret in any read, list, audit entry or log line.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { collectingLogger, policiesState } from '../../../test/support/cdn-policies.ts';
import { HOUR, ManualClock } from '../core/clock.ts';
import type { CdnServices } from './services.ts';
import { SigningKey } from './policies.entities.ts';
import { signingSecrets } from './signing-key-service.ts';
import { signPath } from '../../../shared/src/signing/signed-url.ts';

const clock = new ManualClock(new Date('2027-03-01T00:00:00Z'));
const { log, lines } = collectingLogger();
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock, log });
// Moving the clock past a grace period expires access tokens: the callers log in again then.
let { admin, operator, viewer, subscriber } = await cdnCallers(cp);
const send = caller(cp);
const { endpoint } = await makeEndpoint(cp, admin);
await cp.app.jobs.runDue(); // sets up the recurring schedules (the sweep is first due one period later)
const base = `/v1/cdn/endpoints/${endpoint.id}/signing-keys`;
const GIVEN = 'given-secret-0123456789-abcdefghijklmnop';
const seen: string[] = [GIVEN];

async function makeKey(body: Record<string, unknown> = {}, path = base) {
  const res = await send(admin, 'POST', path, { name: 'key', ...body });
  if (res.status !== 201) throw new Error(`create key: ${res.status} ${res.text}`);
  seen.push(res.body.secret);
  return res.body as Record<string, any> & { id: string; secret: string };
}

/** The secrets the edge would accept for a key (as the snapshot will carry them). */
async function accepted(id: string) {
  const em = cp.app.db.orm.em.fork();
  const key = await em.findOneOrFail(SigningKey, id);
  return signingSecrets(cp.app as unknown as CdnServices, key);
}

t.test('POST /v1/cdn/endpoints/{id}/signing-keys generates a 64-character secret, shown once; defaults; audit-logged', async (t) => {
  const res = await send(admin, 'POST', base, { name: 'Primary' });
  t.equal(res.status, 201, res.text);
  seen.push(res.body.secret);
  t.equal(res.headers.get('location'), `${base}/${res.body.id}`);
  t.match(res.body.secret, /^[A-Za-z0-9_-]{64}$/);
  t.same({ ...res.body, secret: undefined }, {
    id: res.body.id, endpoint_id: endpoint.id, name: 'Primary', algorithm: 'HMAC-SHA256', status: 'active', token_param: 'token', expires_param: 'expires',
    ip_binding_enabled: false, rotated_at: null, grace_period_ends_at: null, created_at: res.body.created_at, updated_at: res.body.updated_at, secret: undefined,
  });
  const [row] = await query<{ secret_sealed: string }>(cp, 'select secret_sealed from cdn_signing_key where id = ?', [res.body.id]);
  t.match(row!.secret_sealed, /^v1\./, 'stored sealed');
  t.notMatch(row!.secret_sealed, res.body.secret);
  t.same((await accepted(res.body.id)).map((s) => s.secret), [res.body.secret], 'the sealed secret opens to the one shown');
  const [audit] = await query<{ actor_id: string }>(cp, `select actor_id from audit_log where action = 'signing_key.created' and resource_id = ?`, [res.body.id]);
  t.equal(audit?.actor_id, admin.id);
  const other = await makeKey({ name: 'Second' });
  t.not(other.secret, res.body.secret, 'every generated secret differs');
});

t.test('a given secret, HMAC-SHA512, own parameter names and IP binding are kept', async (t) => {
  const key = await makeKey({ name: 'Given', secret: GIVEN, algorithm: 'HMAC-SHA512', token_param: 'sig', expires_param: 'exp', ip_binding_enabled: true });
  t.equal(key.secret, GIVEN);
  t.match(key, { algorithm: 'HMAC-SHA512', token_param: 'sig', expires_param: 'exp', ip_binding_enabled: true });
});

t.test('bad input is refused with 400 naming the field, storing nothing', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{}, 'name'],
    [{ name: 'x'.repeat(101) }, 'name'],
    [{ name: 'k', algorithm: 'HMAC-MD5' }, 'algorithm'],
    [{ name: 'k', secret: 'short-secret' }, 'secret'],
    [{ name: 'k', secret: 'x'.repeat(31) }, 'secret'],
    [{ name: 'k', secret: 'with spaces in it 0123456789abcdefghij' }, 'secret'],
    [{ name: 'k', secret: 'x'.repeat(257) }, 'secret'],
    [{ name: 'k', token_param: 'a b' }, 'token_param'],
    [{ name: 'k', token_param: '' }, 'token_param'],
    [{ name: 'k', expires_param: 'token' }, 'expires_param'],
    [{ name: 'k', ip_binding_enabled: 'yes' }, 'ip_binding_enabled'],
    [{ name: 'k', status: 'active' }, 'status'],
  ];
  const before = await policiesState(cp);
  for (const [body, field] of cases) {
    const res = await send(admin, 'POST', base, body);
    t.equal(res.status, 400, `${JSON.stringify(body)} → 400`);
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const key = await makeKey();
  const mid = await policiesState(cp);
  for (const body of [{ grace_period_hours: -1 }, { grace_period_hours: 169 }, { grace_period_hours: 1.5 }, { grace_period_hours: 1, secret: GIVEN }]) {
    const res = await send(admin, 'POST', `${base}/${key.id}/rotate`, body);
    t.equal(res.status, 400, JSON.stringify(body));
  }
  t.same(await policiesState(cp), mid, 'nothing changed');
  t.ok(before);
});

t.test('rotate: a new secret once; the old one accepted through the grace period, then dropped by the sweep; 0 hours drops it at once', async (t) => {
  const key = await makeKey({ name: 'Rotating' });
  const rotated = await send(admin, 'POST', `${base}/${key.id}/rotate`, {});
  t.equal(rotated.status, 200, rotated.text);
  seen.push(rotated.body.secret);
  t.match(rotated.body.secret, /^[A-Za-z0-9_-]{64}$/);
  t.not(rotated.body.secret, key.secret);
  t.equal(rotated.body.id, key.id, 'the same key');
  t.equal(rotated.body.rotated_at, clock.now().toISOString());
  t.equal(rotated.body.grace_period_ends_at, new Date(clock.now().getTime() + 24 * HOUR).toISOString(), 'default 24 hours');
  t.same((await accepted(key.id)).map((s) => s.secret), [rotated.body.secret, key.secret], 'both accepted during the grace');
  const read = await send(viewer, 'GET', `${base}/${key.id}`);
  t.equal(read.body.grace_period_ends_at, rotated.body.grace_period_ends_at);
  t.notOk('secret' in read.body, 'reads never show a secret');

  clock.advance(24 * HOUR + 1000);
  ({ admin, operator, viewer, subscriber } = await cdnCallers(cp));
  t.same((await accepted(key.id)).map((s) => s.secret), [rotated.body.secret], 'the old one no longer accepted once the grace ended');
  t.equal((await send(viewer, 'GET', `${base}/${key.id}`)).body.grace_period_ends_at, null);
  await cp.app.jobs.runDue();
  const [row] = await query<{ retired_secrets: unknown[] }>(cp, 'select retired_secrets from cdn_signing_key where id = ?', [key.id]);
  t.same(row!.retired_secrets, [], 'the sweep dropped it from storage');

  const again = await send(admin, 'POST', `${base}/${key.id}/rotate`, { grace_period_hours: 0 });
  seen.push(again.body.secret);
  t.equal(again.body.grace_period_ends_at, null);
  t.same((await accepted(key.id)).map((s) => s.secret), [again.body.secret], '0 invalidates the old secret at once');
  const actions = await query<{ action: string; metadata: Record<string, unknown> }>(cp, `select action, metadata from audit_log where resource_id = ? order by created_at`, [key.id]);
  t.same(actions.map((a) => a.action), ['signing_key.created', 'signing_key.rotated', 'signing_key.rotated']);
  t.match(actions[1]!.metadata, { grace_period_hours: 24 });
});

t.test('rotate with grace_period_hours 0 ends every earlier secret still in its grace, not only the one it replaces', async (t) => {
  const key = await makeKey({ name: 'Rotated thrice' });
  const second = await send(admin, 'POST', `${base}/${key.id}/rotate`, { grace_period_hours: 48 });
  clock.advance(HOUR);
  ({ admin, operator, viewer, subscriber } = await cdnCallers(cp));
  const third = await send(admin, 'POST', `${base}/${key.id}/rotate`, { grace_period_hours: 24 });
  seen.push(second.body.secret, third.body.secret);
  t.same((await accepted(key.id)).map((s) => s.secret), [third.body.secret, key.secret, second.body.secret], 'two earlier secrets in their grace');
  t.equal(third.body.grace_period_ends_at, new Date(clock.now().getTime() + 47 * HOUR).toISOString(), 'the latest end of them');

  const fourth = await send(admin, 'POST', `${base}/${key.id}/rotate`, { grace_period_hours: 0 });
  t.equal(fourth.status, 200, fourth.text);
  seen.push(fourth.body.secret);
  t.equal(fourth.body.grace_period_ends_at, null, 'the key reports no grace');
  t.equal((await send(viewer, 'GET', `${base}/${key.id}`)).body.grace_period_ends_at, null);
  t.same((await accepted(key.id)).map((s) => s.secret), [fourth.body.secret], 'only the new secret is accepted');
  const [row] = await query<{ retired_secrets: unknown[] }>(cp, 'select retired_secrets from cdn_signing_key where id = ?', [key.id]);
  t.same(row!.retired_secrets, [], 'none is kept in storage');
  const [audit] = await query<{ metadata: Record<string, unknown> }>(cp, `select metadata from audit_log where resource_id = ? and action = 'signing_key.rotated' order by created_at desc limit 1`, [key.id]);
  t.match(audit!.metadata, { grace_period_hours: 0 });
});

t.test('token authentication: enabling needs an active key (422); the last active key cannot then be deleted (409)', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const keys = `/v1/cdn/endpoints/${e.id}/signing-keys`;
  const before = await policiesState(cp);
  const refused = await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { token_auth_enabled: true });
  t.equal(refused.status, 422);
  t.equal(refused.body.errors[0].field, 'token_auth_enabled');
  t.same(await policiesState(cp), before, 'nothing changed');
  const first = await makeKey({}, keys);
  const second = await makeKey({}, keys);
  const on = await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { token_auth_enabled: true });
  t.equal(on.status, 200, on.text);
  t.equal(on.body.token_auth_enabled, true);
  t.equal((await send(admin, 'DELETE', `${keys}/${first.id}`)).status, 204, 'another active key remains');
  const mid = await policiesState(cp);
  const last = await send(admin, 'DELETE', `${keys}/${second.id}`);
  t.equal(last.status, 409);
  t.equal(last.body.code, 'RESOURCE_IN_USE');
  t.same(await policiesState(cp), mid, 'nothing removed');
  await send(admin, 'PATCH', `/v1/cdn/endpoints/${e.id}`, { token_auth_enabled: false });
  t.equal((await send(admin, 'DELETE', `${keys}/${second.id}`)).status, 204, 'deletable once token authentication is off');
  t.equal((await send(viewer, 'GET', `${keys}/${second.id}`)).status, 404);
  t.equal((await query(cp, `select 1 from audit_log where action = 'signing_key.deleted' and resource_id = ?`, [second.id])).length, 1);
});

t.test('keys of another endpoint are 404; lists are oldest first; distribution aliases list and create the same keys', async (t) => {
  const { endpoint: e } = await makeEndpoint(cp, admin);
  const own = `/v1/cdn/endpoints/${e.id}/signing-keys`;
  const alias = `/v1/cdn/distributions/${e.id}/signing-keys`;
  const a = await makeKey({ name: 'A' }, own);
  const b = await makeKey({ name: 'B' }, alias);
  t.equal(b.endpoint_id, e.id);
  for (const path of [own, alias]) {
    const list = await send(viewer, 'GET', path);
    t.same(list.body.data.map((k: { id: string }) => k.id), [a.id, b.id], path);
    t.notMatch(list.text, /"secret"/, 'no secret in a list');
  }
  t.equal((await send(viewer, 'GET', `${base}/${a.id}`)).status, 404, 'not under another endpoint');
  t.equal((await send(admin, 'POST', `${base}/${a.id}/rotate`, {})).status, 404);
  t.equal((await send(admin, 'DELETE', `${base}/${a.id}`)).status, 404);
  t.equal((await send(viewer, 'GET', `/v1/cdn/distributions/${crypto.randomUUID()}/signing-keys`)).status, 404);
  t.equal((await send(admin, 'POST', `/v1/cdn/endpoints/${crypto.randomUUID()}/signing-keys`, { name: 'x' })).status, 404);
  const paged = await send(viewer, 'GET', `${own}?limit=1`);
  t.match(paged.body.meta, { total: 2, has_more: true });
  t.equal((await send(viewer, 'GET', `${own}?sort=name`)).status, 400);
});

t.test('roles: viewers and operators read but cannot write (403, nothing changes); subscribers and anonymous callers get nothing', async (t) => {
  const key = await makeKey();
  const before = await policiesState(cp);
  for (const who of [viewer, operator]) {
    t.equal((await send(who, 'GET', base)).status, 200);
    t.equal((await send(who, 'GET', `${base}/${key.id}`)).status, 200);
    t.equal((await send(who, 'POST', base, { name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `/v1/cdn/distributions/${endpoint.id}/signing-keys`, { name: 'x' })).status, 403);
    t.equal((await send(who, 'POST', `${base}/${key.id}/rotate`, {})).status, 403);
    t.equal((await send(who, 'DELETE', `${base}/${key.id}`)).status, 403);
  }
  t.equal((await send(subscriber, 'GET', base)).status, 403);
  t.equal((await send(null, 'GET', base)).status, 401);
  t.same(await policiesState(cp), before);
});

t.test('Idempotency-Key: a replay returns the first key (and its secret) without making another', async (t) => {
  const key = crypto.randomUUID();
  const first = await send(admin, 'POST', base, { name: 'idem' }, { 'idempotency-key': key });
  seen.push(first.body.secret);
  const again = await send(admin, 'POST', base, { name: 'idem' }, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.body.id, first.body.id);
  t.equal((await query(cp, 'select 1 from cdn_signing_key where name = ?', ['idem'])).length, 1);
});

t.test('no secret appears in any read, list, audit entry, stored column or log line', async (t) => {
  t.ok(seen.length > 5);
  const texts: string[] = [];
  texts.push((await send(viewer, 'GET', base)).text);
  for (const row of await query<{ id: string }>(cp, 'select id from cdn_signing_key where endpoint_id = ?', [endpoint.id])) {
    texts.push((await send(viewer, 'GET', `${base}/${row.id}`)).text);
  }
  texts.push(JSON.stringify(await query(cp, `select * from audit_log where resource_type = 'signing_key'`)));
  texts.push(JSON.stringify(await query(cp, 'select * from cdn_signing_key')));
  texts.push(lines.join('\n'));
  t.ok(lines.length > 10, 'the log was collected');
  for (const secret of seen) {
    for (const text of texts) t.notOk(text.includes(secret), 'secret absent');
  }
});

t.test('the signing-key operations document the signed-URL algorithm with a worked example that the edge\'s own signer reproduces', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  const signed = signPath({ path: '/videos/intro.mp4', expires: 1767225600, secret: 'example-secret-for-the-docs-only-0123456789' });
  for (const [path, method] of [['/v1/cdn/endpoints/{id}/signing-keys', 'post'], ['/v1/cdn/endpoints/{id}/signing-keys/{key_id}/rotate', 'post'], ['/v1/cdn/endpoints/{id}/signing-keys', 'get']] as const) {
    const description: string = doc.paths[path][method].description;
    t.ok(description.includes(signed), `${method} ${path} carries the example URL ${signed}`);
    t.match(description, /canonical = path \+ "\\n" \+ expires/);
    t.match(description, /npm run sign-url/);
  }
});
