// Payment methods through the real server on PostgreSQL and Redis (document 1
// §4.4, DESIGN.md §5): attach from gateway tokens, the default rules,
// deletion against live subscriptions, ownership, idempotency, limits.
import pg from 'pg';
import t, { type Test } from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { bearer, countRows, createAdmin, createLoggedInUser, login, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { findDefaultPaymentMethod, findUserPaymentMethod } from './index.ts';
import { MAX_PAYMENT_METHODS_PER_USER } from './payment-method-service.ts';

let offsetMs = 0;
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock: { now: () => new Date(Date.now() + offsetMs) } });
const admin = await createAdmin(cp);

const attach = (account: TestAccount, json: Record<string, unknown>, headers: Record<string, string> = {}) =>
  cp.request('POST', '/v1/payment-methods', { headers: bearer(account.accessToken, headers), json });
const get = (account: TestAccount, path: string) => cp.request('GET', path, { headers: bearer(account.accessToken) });
const makeDefault = (account: TestAccount, id: string) => cp.request('POST', `/v1/payment-methods/${id}/default`, { headers: bearer(account.accessToken) });
const remove = (account: TestAccount, id: string) => cp.request('DELETE', `/v1/payment-methods/${id}`, { headers: bearer(account.accessToken) });

/** Attaches and returns the record (fails the test on anything but 201). */
async function attached(t: Test, account: TestAccount, token: string, extra: Record<string, unknown> = {}) {
  const res = await attach(account, { payment_method_token: token, ...extra });
  t.equal(res.status, 201, `attach ${token}: ${res.text}`);
  return res.body.data as { id: string; is_default: boolean; [k: string]: unknown };
}

const rowsOf = (userId: string) =>
  query<{ id: string; is_default: boolean; version: number }>(cp, 'select id, is_default, version from billing_payment_method where user_id = ? order by created_at', [userId]);
const defaultsOf = async (userId: string) => (await rowsOf(userId)).filter((r) => r.is_default).map((r) => r.id);

let planId: string | undefined;
/** A subscription inserted straight into the database (the subscription routes come later). */
async function insertSubscription(userId: string, status: string, paymentMethodId: string | null = null, type = 'svod'): Promise<string> {
  if (!planId) {
    planId = crypto.randomUUID();
    await query(cp, `insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
      max_quality, has_downloads, has_ads, is_active, created_at, updated_at) values (?, 'Standard', 'svod', 999, 'EUR', 'monthly', 4, 2, 5, 'HD', false, false, true, now(), now())`, [planId]);
  }
  const id = crypto.randomUUID();
  await query(cp, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams,
    max_devices, current_period_start, current_period_end, payment_method_id, created_at, updated_at)
    values (?, ?, ?, ?, ?, 999, 'EUR', 'monthly', 4, 2, 5, now(), now() + interval '1 month', ?, now(), now())`, [id, userId, planId, type, status, paymentMethodId]);
  return id;
}

t.test('POST /v1/payment-methods attaches from a gateway token: 201 with Location, only display details, the first is the default', async (t) => {
  const u = await createLoggedInUser(cp);
  const res = await attach(u, { payment_method_token: 'tok_visa', billing_name: '  Ada Lovelace ' });
  t.equal(res.status, 201);
  const pm = res.body.data;
  t.equal(res.headers.get('location'), `/v1/payment-methods/${pm.id}`);
  t.ok(res.headers.get('etag'), 'a versioned record');
  const year = new Date().getUTCFullYear();
  t.same(Object.keys(pm).sort(), ['billing_country', 'billing_name', 'brand', 'created_at', 'exp_month', 'exp_year', 'id', 'is_default', 'is_expired', 'last4', 'type', 'updated_at', 'wallet_email']);
  t.match(pm, { type: 'card', brand: 'visa', last4: '4242', exp_month: 12, exp_year: year + 4, is_expired: false, is_default: true, billing_name: 'Ada Lovelace', billing_country: 'US', wallet_email: null });
  t.notOk('gateway_payment_method_id' in pm, 'the gateway id never leaves');
  const [row] = await query<{ gateway: string; gateway_payment_method_id: string }>(cp, 'select gateway, gateway_payment_method_id from billing_payment_method where id = ?', [pm.id]);
  t.equal(row!.gateway, 'test');
  t.match(row!.gateway_payment_method_id, /^pm_test_visa_/);

  const second = await attached(t, u, 'tok_mastercard');
  t.equal(second.is_default, false, 'a later method is not the default unless asked');
  t.match(second, { brand: 'mastercard', last4: '4444', billing_name: null });
  const wallet = await attached(t, u, 'tok_paypal');
  t.match(wallet, { type: 'paypal', brand: null, last4: null, exp_month: null, exp_year: null, is_expired: false, wallet_email: 'buyer@example.com' });
  t.same(await defaultsOf(u.id), [pm.id]);
});

t.test('POST /v1/payment-methods with set_as_default moves the default; one default per user in the database', async (t) => {
  const u = await createLoggedInUser(cp);
  const first = await attached(t, u, 'tok_visa');
  const second = await attached(t, u, 'tok_amex', { set_as_default: true });
  t.equal(second.is_default, true);
  t.same(await defaultsOf(u.id), [second.id]);
  const list = await get(u, '/v1/payment-methods');
  t.equal(list.status, 200);
  t.same(list.body.data.map((m: { id: string; is_default: boolean }) => [m.id, m.is_default]), [[second.id, true], [first.id, false]]);
  t.notOk(list.body.meta, 'a whole list, as document 1 §4.4 shows it');
});

t.test('POST /v1/payment-methods: first attaches of one user racing each other leave exactly one default (each waits for the user\'s lock)', { skip: !cp.database.real && 'needs PostgreSQL (several sessions)' }, async (t) => {
  const u = await createLoggedInUser(cp);
  // Another session holds back every insert into the table, so all requests have looked for a default before any is stored.
  const holder = new pg.Client({ connectionString: cp.database.url });
  await holder.connect();
  t.teardown(() => holder.end());
  await holder.query('begin');
  await holder.query('lock table billing_payment_method in share row exclusive mode');
  const racing = ['tok_visa', 'tok_mastercard', 'tok_amex'].map((token) => attach(u, { payment_method_token: token }));
  const waiting = async () => {
    await holder.query('select pg_stat_clear_snapshot()'); // else the holder's transaction sees its first snapshot of the activity view
    return (await holder.query(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows[0].n;
  };
  await eventually(async () => (await waiting()) === racing.length, 'every attach waiting in the database');
  await holder.query('commit');
  const results = await Promise.all(racing);
  t.same(results.map((r) => r.status), [201, 201, 201], results.map((r) => r.text).join('\n'));
  t.equal(results.filter((r) => r.body.data.is_default).length, 1, 'one answer says default');
  t.equal((await defaultsOf(u.id)).length, 1, 'one default stored');
});

t.test('POST /v1/payment-methods refuses tokens the gateway does not take, and stores nothing', async (t) => {
  const u = await createLoggedInUser(cp);
  const unknown = await attach(u, { payment_method_token: 'tok_nonsense' });
  t.equal(unknown.status, 400);
  t.equal(unknown.body.code, 'VALIDATION_ERROR');
  t.equal(unknown.body.errors[0].field, 'payment_method_token');

  const expired = await attach(u, { payment_method_token: 'tok_expired' });
  t.equal(expired.status, 402);
  t.equal(expired.body.code, 'PAYMENT_FAILED');
  t.equal(expired.body.decline_code, 'expired_card');
  const declined = await attach(u, { payment_method_token: 'tok_cardDeclined' });
  t.equal(declined.status, 402);
  t.equal(declined.body.decline_code, 'card_declined');

  const down = await attach(u, { payment_method_token: 'tok_gatewayUnavailable' }, { 'idempotency-key': 'retry-after-outage' });
  t.equal(down.status, 503, 'the provider is down: retry later');
  t.equal(down.body.code, 'SERVICE_UNAVAILABLE');
  const retried = await attach(u, { payment_method_token: 'tok_gatewayUnavailable' }, { 'idempotency-key': 'retry-after-outage' });
  t.equal(retried.status, 503, 'a 5xx is not recorded: the same key is tried again');
  t.notOk(retried.headers.get('idempotent-replayed'));
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [u.id]), 0);
});

t.test('POST /v1/payment-methods refuses card data and malformed bodies with 400, and stores nothing', async (t) => {
  // Two callers: refused attaches spend the per-caller attach budget too.
  const callers = [await createLoggedInUser(cp), await createLoggedInUser(cp)];
  const cases: [Record<string, unknown>, string][] = [
    [{ payment_method_token: '4242424242424242' }, 'payment_method_token'],
    [{ payment_method_token: 'tok_4242424242424242' }, 'payment_method_token'],
    [{ payment_method_token: '4242 4242 4242 4242' }, 'payment_method_token'],
    [{ payment_method_token: '' }, 'payment_method_token'],
    [{ payment_method_token: 't'.repeat(256) }, 'payment_method_token'],
    [{}, 'payment_method_token'],
    [{ payment_method_token: 'tok_visa', card_number: '4242424242424242' }, 'card_number'],
    [{ payment_method_token: 'tok_visa', cvc: '123' }, 'cvc'],
    [{ payment_method_token: 'tok_visa', set_as_default: 'yes' }, 'set_as_default'],
    [{ payment_method_token: 'tok_visa', billing_name: 'x'.repeat(101) }, 'billing_name'],
    [{ payment_method_token: 'tok_visa', billing_name: 'two\nlines' }, 'billing_name'],
  ];
  for (const [i, [json, field]] of cases.entries()) {
    const res = await attach(callers[i % 2]!, json);
    t.equal(res.status, 400, JSON.stringify(json).slice(0, 80));
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `${field}: ${JSON.stringify(res.body.errors)}`);
    t.notMatch(res.text, /4242424242424242/, 'the card number is not echoed');
  }
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id in (?, ?)', callers.map((c) => c.id)), 0);
});

t.test('POST /v1/payment-methods honours Idempotency-Key: a replay returns the same method, another body with the key is refused', async (t) => {
  const u = await createLoggedInUser(cp);
  const key = crypto.randomUUID();
  const first = await attach(u, { payment_method_token: 'tok_visa' }, { 'idempotency-key': key });
  t.equal(first.status, 201);
  const again = await attach(u, { payment_method_token: 'tok_visa' }, { 'idempotency-key': key });
  t.equal(again.status, 201);
  t.equal(again.headers.get('idempotent-replayed'), 'true');
  t.equal(again.body.data.id, first.body.data.id);
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [u.id]), 1, 'attached once');
  const other = await attach(u, { payment_method_token: 'tok_amex' }, { 'idempotency-key': key });
  t.equal(other.status, 422);
  t.equal(other.body.code, 'IDEMPOTENCY_KEY_REUSED');
  const refused = await attach(u, { payment_method_token: 'tok_expired' }, { 'idempotency-key': 'declined-once' });
  const replayed = await attach(u, { payment_method_token: 'tok_expired' }, { 'idempotency-key': 'declined-once' });
  t.same([refused.status, replayed.status], [402, 402], 'a decline is an outcome and is replayed');
  t.equal(replayed.headers.get('idempotent-replayed'), 'true');
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [u.id]), 1);
});

t.test('POST /v1/payment-methods is rate-limited per caller (card-testing guard): the 11th attach in an hour is 429', async (t) => {
  const u = await createLoggedInUser(cp);
  for (let i = 0; i < 10; i++) t.equal((await attach(u, { payment_method_token: 'tok_nonsense' })).status, 400, `attempt ${i + 1}`);
  const limited = await attach(u, { payment_method_token: 'tok_visa' });
  t.equal(limited.status, 429);
  t.equal(limited.body.code, 'RATE_LIMITED');
  t.ok(Number(limited.headers.get('retry-after')) > 0);
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [u.id]), 0, 'nothing attached past the limit');
  const other = await createLoggedInUser(cp);
  t.equal((await attach(other, { payment_method_token: 'tok_visa' })).status, 201, 'another caller has their own budget');
});

t.test(`POST /v1/payment-methods refuses a method beyond ${MAX_PAYMENT_METHODS_PER_USER} per user with 409`, async (t) => {
  const u = await createLoggedInUser(cp);
  for (let i = 0; i < MAX_PAYMENT_METHODS_PER_USER; i++) {
    await query(cp, `insert into billing_payment_method (id, user_id, gateway, gateway_payment_method_id, type, brand, last4, exp_month, exp_year, is_default, created_at, updated_at)
      values (?, ?, 'test', ?, 'card', 'visa', '4242', 12, 2040, ?, now(), now())`, [crypto.randomUUID(), u.id, `pm_test_visa_204012_${i.toString(16).padStart(16, '0')}`, i === 0]);
  }
  const res = await attach(u, { payment_method_token: 'tok_visa' });
  t.equal(res.status, 409);
  t.equal(res.body.code, 'CONFLICT');
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [u.id]), MAX_PAYMENT_METHODS_PER_USER);
});

t.test('GET /v1/payment-methods/default reads the default (the static path is not taken as a pm_id); 404 when none', async (t) => {
  const u = await createLoggedInUser(cp);
  const none = await get(u, '/v1/payment-methods/default');
  t.equal(none.status, 404);
  t.equal(none.body.code, 'NOT_FOUND');
  const pm = await attached(t, u, 'tok_visa');
  await attached(t, u, 'tok_mastercard');
  const res = await get(u, '/v1/payment-methods/default');
  t.equal(res.status, 200);
  t.equal(res.body.data.id, pm.id);
  t.ok(res.headers.get('etag'));
  const unchanged = await cp.request('GET', '/v1/payment-methods/default', { headers: bearer(u.accessToken, { 'if-none-match': res.headers.get('etag')! }) });
  t.equal(unchanged.status, 304);
  const one = await get(u, `/v1/payment-methods/${pm.id}`);
  t.equal(one.status, 200, 'the parameter route still reads one method');
  t.same(one.body, res.body);
  for (const [method, path] of [['DELETE', '/v1/payment-methods/default'], ['POST', '/v1/payment-methods/default/default']] as const) {
    const bad = await cp.request(method, path, { headers: bearer(u.accessToken) });
    t.equal(bad.status, 400, `${method} ${path}: "default" is not a pm_id`);
    t.equal(bad.body.errors[0].field, 'pm_id');
  }
  t.same(await defaultsOf(u.id), [pm.id], 'nothing changed');
});

t.test('POST /v1/payment-methods/{pm_id}/default makes a method the default and demotes the previous one', async (t) => {
  const u = await createLoggedInUser(cp);
  const first = await attached(t, u, 'tok_visa');
  const second = await attached(t, u, 'tok_mastercard');
  const res = await makeDefault(u, second.id);
  t.equal(res.status, 200);
  t.match(res.body.data, { id: second.id, is_default: true });
  t.same(await defaultsOf(u.id), [second.id]);
  const again = await makeDefault(u, second.id);
  t.equal(again.status, 200, 'already the default: answered as is');
  t.equal(again.headers.get('etag'), res.headers.get('etag'), 'and not changed');
  t.equal((await get(u, `/v1/payment-methods/${first.id}`)).body.data.is_default, false);
  t.equal((await makeDefault(u, crypto.randomUUID())).status, 404);
  t.equal((await makeDefault(u, 'not-a-uuid')).status, 400);
});

t.test('another user\'s payment method is a 404 for every operation, and nothing changes', async (t) => {
  const owner = await createLoggedInUser(cp);
  const intruder = await createLoggedInUser(cp);
  const a = await attached(t, owner, 'tok_visa');
  const b = await attached(t, owner, 'tok_mastercard');
  await attached(t, intruder, 'tok_amex');
  const before = await rowsOf(owner.id);
  for (const res of [await get(intruder, `/v1/payment-methods/${b.id}`), await makeDefault(intruder, b.id), await remove(intruder, a.id), await remove(intruder, b.id)]) {
    t.equal(res.status, 404);
    t.equal(res.body.code, 'NOT_FOUND');
  }
  t.same(await rowsOf(owner.id), before, 'the owner\'s methods are untouched (versions included)');
  t.notOk((await get(intruder, '/v1/payment-methods')).body.data.some((m: { id: string }) => m.id === a.id || m.id === b.id), 'nor listed to others');
});

t.test('an administrator who also holds subscriber acts on anyone\'s payment method (the global grant bypasses ownership although the user-scoped one matches first), audit-logged', async (t) => {
  const owner = await createLoggedInUser(cp);
  const a = await attached(t, owner, 'tok_visa');
  const b = await attached(t, owner, 'tok_mastercard');
  t.equal((await get(admin, `/v1/payment-methods/${b.id}`)).status, 200);
  const made = await makeDefault(admin, b.id);
  t.equal(made.status, 200);
  t.same(await defaultsOf(owner.id), [b.id]);
  t.equal((await remove(admin, a.id)).status, 204);
  t.same((await rowsOf(owner.id)).map((r) => r.id), [b.id]);
  t.equal(await countRows(cp, 'audit_log', `action = 'payment_method.made_default' and resource_id = ? and actor_id = ?`, [b.id, admin.id]), 1);
  t.equal(await countRows(cp, 'audit_log', `action = 'payment_method.deleted' and resource_id = ? and actor_id = ?`, [a.id, admin.id]), 1);
  t.equal(await countRows(cp, 'audit_log', `resource_type = 'payment_method' and actor_id = ?`, [owner.id]), 0, 'an owner\'s own changes are not audit entries');
  t.equal((await get(admin, '/v1/payment-methods')).body.data.length, 0, 'the list stays the caller\'s own');
});

t.test('DELETE /v1/payment-methods/{pm_id} refuses the default while a subscription is live: 409 DEFAULT_PAYMENT_METHOD_IN_USE', async (t) => {
  for (const status of ['trialing', 'active', 'past_due', 'paused']) {
    const u = await createLoggedInUser(cp);
    const pm = await attached(t, u, 'tok_visa');
    await attached(t, u, 'tok_mastercard');
    await insertSubscription(u.id, status, pm.id);
    const res = await remove(u, pm.id);
    t.equal(res.status, 409, status);
    t.equal(res.body.code, 'DEFAULT_PAYMENT_METHOD_IN_USE');
    t.same(await defaultsOf(u.id), [pm.id], `${status}: still there and still the default`);
  }
});

t.test('DELETE /v1/payment-methods/{pm_id} of the default without a live subscription: 204, the newest remaining method becomes the default', async (t) => {
  const u = await createLoggedInUser(cp);
  const first = await attached(t, u, 'tok_visa');
  await attached(t, u, 'tok_mastercard');
  const newest = await attached(t, u, 'tok_amex');
  await insertSubscription(u.id, 'canceled', first.id);
  await insertSubscription(u.id, 'expired', first.id, 'live');
  const res = await remove(u, first.id);
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(await countRows(cp, 'billing_payment_method', 'id = ?', [first.id]), 0);
  t.same(await defaultsOf(u.id), [newest.id]);
  t.equal((await remove(u, first.id)).status, 404, 'gone');
});

t.test('DELETE /v1/payment-methods/{pm_id} of a non-default method: 204, live subscriptions billed to it move to the default', async (t) => {
  const u = await createLoggedInUser(cp);
  const main = await attached(t, u, 'tok_visa');
  const spare = await attached(t, u, 'tok_mastercard');
  const live = await insertSubscription(u.id, 'active', spare.id);
  const ended = await insertSubscription(u.id, 'canceled', spare.id, 'live');
  t.equal((await remove(u, spare.id)).status, 204);
  const subscriptions = await query<{ id: string; payment_method_id: string }>(cp, 'select id, payment_method_id from billing_subscription where user_id = ?', [u.id]);
  t.equal(subscriptions.find((s) => s.id === live)!.payment_method_id, main.id, 'the live subscription is billed to the default');
  t.equal(subscriptions.find((s) => s.id === ended)!.payment_method_id, spare.id, 'an ended one keeps its history');
  t.same(await defaultsOf(u.id), [main.id]);
});

t.test('DELETE /v1/payment-methods/{pm_id} of the last method leaves no default; the next attach becomes the default', async (t) => {
  const u = await createLoggedInUser(cp);
  const only = await attached(t, u, 'tok_visa');
  t.equal((await remove(u, only.id)).status, 204);
  t.equal((await get(u, '/v1/payment-methods/default')).status, 404);
  t.equal((await attached(t, u, 'tok_amex')).is_default, true);
});

t.test('is_expired is computed from the expiry by the request clock: true from the first day after the expiry month (UTC)', async (t) => {
  t.teardown(() => { offsetMs = 0; });
  const u = await createLoggedInUser(cp);
  const pm = await attached(t, u, 'tok_visa_expiring');
  t.equal(pm.is_expired, false);
  const now = new Date();
  t.match(pm, { exp_month: now.getUTCMonth() + 1, exp_year: now.getUTCFullYear() });
  const endOfExpiry = Date.UTC(pm.exp_year as number, pm.exp_month as number, 1);
  const readAt = async (ms: number) => {
    offsetMs = ms - Date.now();
    // A token issued by the moved clock (the one issued before would be expired by it).
    const session = await login(cp, u.email, u.password);
    return get({ ...u, ...session }, `/v1/payment-methods/${pm.id}`);
  };
  // The moved clock keeps running while the login hashes (seconds on a loaded host): start a few minutes before the end.
  t.equal((await readAt(endOfExpiry - 5 * 60_000)).body.data.is_expired, false, 'the last minutes of the month');
  const after = await readAt(endOfExpiry);
  t.equal(after.body.data.is_expired, true, 'the first instant of the next month');
  t.equal(await countRows(cp, 'billing_payment_method', 'id = ? and exp_month is not null', [pm.id]), 1, 'only the expiry is stored, not the flag');
});

t.test('no column holds anything like a card number, and only display details are stored', async (t) => {
  const u = await createLoggedInUser(cp);
  for (const token of ['tok_visa', 'tok_mastercard', 'tok_amex', 'tok_fr', 'tok_paypal', 'tok_chargeDeclined', 'tok_insufficientFunds']) await attached(t, u, token);
  const columns = await query<{ column_name: string }>(cp, `select column_name from information_schema.columns where table_name = 'billing_payment_method' order by column_name`);
  t.same(columns.map((c) => c.column_name), [
    'billing_country', 'billing_name', 'brand', 'created_at', 'exp_month', 'exp_year', 'gateway', 'gateway_payment_method_id', 'id', 'is_default',
    'last4', 'type', 'updated_at', 'user_id', 'version', 'wallet_email',
  ]);
  // Every value of every column but the uuids (whose hex may hold digit runs by chance) and the timestamps.
  const rows = await query<Record<string, unknown>>(cp, `select gateway, gateway_payment_method_id, type, brand, last4, exp_month, exp_year, billing_name,
    billing_country, wallet_email, is_default, version from billing_payment_method where user_id = ?`, [u.id]);
  t.equal(rows.length, 7);
  for (const row of rows) {
    for (const [column, value] of Object.entries(row)) {
      const digits = String(value).replace(/[ -]/g, '');
      t.notOk(/\d{13,19}/.test(digits), `${column}: no card-number-like digit run in ${JSON.stringify(value)}`);
    }
  }
  t.equal(await countRows(cp, 'billing_payment_method', `user_id = ? and last4 !~ '^[0-9]{4}$'`, [u.id]), 0, 'last4 is four digits where set');
  await t.rejects(query(cp, `update billing_payment_method set last4 = '42424242' where user_id = ?`, [u.id]), 'the column takes four characters');
});

t.test('findUserPaymentMethod gives billing a user\'s own method by id, never another user\'s', async (t) => {
  const u = await createLoggedInUser(cp);
  const other = await createLoggedInUser(cp);
  const pm = await attached(t, u, 'tok_visa');
  const em = cp.database.db.orm.em.fork();
  t.match(await findUserPaymentMethod(em, u.id, pm.id), { id: pm.id, last4: '4242' });
  t.equal(await findUserPaymentMethod(em, other.id, pm.id), null);
  t.equal(await findUserPaymentMethod(em, u.id, crypto.randomUUID()), null);
  t.equal((await findDefaultPaymentMethod(em, u.id))?.id, pm.id);
  t.equal(await findDefaultPaymentMethod(em, other.id), null);
});

t.test('payment-method routes need a caller with the permission', async (t) => {
  const id = crypto.randomUUID();
  for (const [method, path] of [['GET', '/v1/payment-methods'], ['POST', '/v1/payment-methods'], ['GET', '/v1/payment-methods/default'], ['GET', `/v1/payment-methods/${id}`], ['POST', `/v1/payment-methods/${id}/default`], ['DELETE', `/v1/payment-methods/${id}`]] as const) {
    t.equal((await cp.request(method, path, method === 'POST' && !path.endsWith('default') ? { json: { payment_method_token: 'tok_visa' } } : {})).status, 401, `${method} ${path}`);
  }
  const unverified = await createLoggedInUser(cp, { status: 'pending_verification' });
  const res = await attach(unverified, { payment_method_token: 'tok_visa' });
  t.equal(res.status, 403);
  t.equal(res.body.code, 'EMAIL_NOT_VERIFIED');
  t.equal(await countRows(cp, 'billing_payment_method', 'user_id = ?', [unverified.id]), 0);
});

t.test('the OpenAPI document shows the payment-method operations, the test tokens and Idempotency-Key', async (t) => {
  const doc = (await cp.request('GET', '/openapi.json')).body;
  t.ok(doc.paths['/v1/payment-methods'].get);
  const post = doc.paths['/v1/payment-methods'].post;
  t.ok(post);
  t.ok(post.parameters.some((p: { name: string }) => p.name === 'Idempotency-Key'));
  for (const token of ['tok_visa', 'tok_mastercard', 'tok_amex', 'tok_chargeDeclined', 'tok_expired', 'tok_insufficientFunds', 'tok_visa_expiring']) t.match(post.description, token);
  t.ok(post.responses['402'] && post.responses['409'] && post.responses['429']);
  t.ok(doc.paths['/v1/payment-methods/default'].get);
  t.ok(doc.paths['/v1/payment-methods/{pm_id}'].get && doc.paths['/v1/payment-methods/{pm_id}'].delete);
  t.ok(doc.paths['/v1/payment-methods/{pm_id}'].delete.responses['409']);
  t.ok(doc.paths['/v1/payment-methods/{pm_id}/default'].post);
});
