// Administration of subscriptions through the real server (document 1 §4.8):
// assign (complimentary, trial overrides, 409), read, lists with filters,
// patch with If-Match, cancel, pause, resume, reactivate, extend; each audit-
// logged with the acting admin; subscribers are refused; bad input changes nothing.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, login, createAdmin, createLoggedInUser, createSuperadmin, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { DAY, ManualClock } from '../core/clock.ts';

const clock = new ManualClock(Date.parse('2026-05-01T08:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
/** After the clock moved past the access token's life. */
const relogin = async () => Object.assign(admin, await login(cp, admin.email, admin.password));
const send = (who: TestAccount, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: bearer(who.accessToken, headers), json });

async function createPlan(overrides: Record<string, unknown> = {}): Promise<{ id: string }> {
  const res = await send(superadmin, 'POST', '/v1/admin/plans', {
    name: 'Standard', type: 'svod', price: 8, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, ...overrides,
  });
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data;
}
const plan = await createPlan();
const bigger = await createPlan({ name: 'Bigger', price: 16 });
const trialPlan = await createPlan({ name: 'Live', type: 'live', trial_days: 30 });
const base = (userId: string) => `/v1/admin/users/${userId}/subscriptions`;
const audits = (id: string, action: string) => countRows(cp, 'audit_log', 'resource_id = ? and action = ? and actor_id = ?', [id, action, admin.id]);

t.test('POST /v1/admin/users/{id}/subscriptions assigns a complimentary plan (no charge), refuses a second (409) and subscribers (403)', async (t) => {
  const user = await createLoggedInUser(cp);
  const res = await send(admin, 'POST', base(user.id), { plan_id: plan.id, admin_note: 'press account' });
  t.equal(res.status, 201, res.text);
  t.match(res.body.data, { status: 'active', payment_method_id: null, payment_method_last4: null, auto_renew: true });
  t.match((await query(cp, 'select status, amount_minor, discount_minor, amount_due_minor from billing_invoice where subscription_id = ?', [res.body.data.id]))[0],
    { status: 'paid', amount_minor: '800', discount_minor: '800', amount_due_minor: '0' });
  const audit = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'subscription.assigned' and resource_id = ? and actor_id = ?`, [res.body.data.id, admin.id]);
  t.equal(audit[0]?.metadata.reason, 'press account');
  const again = await send(admin, 'POST', base(user.id), { plan_id: bigger.id });
  t.equal(again.status, 409);
  t.equal(again.body.code, 'SUBSCRIPTION_EXISTS');
  t.equal((await send(user, 'POST', base(user.id), { plan_id: plan.id })).status, 403);
  t.equal((await send(user, 'GET', '/v1/admin/subscriptions')).status, 403);
  t.equal((await send(admin, 'POST', base(crypto.randomUUID()), { plan_id: plan.id })).status, 404);
});

t.test('POST /v1/admin/users/{id}/subscriptions: trial_end overrides (a past one skips the trial), current_period_end overrides; bad input changes nothing', async (t) => {
  const user = await createLoggedInUser(cp);
  const pm = (await send(user, 'POST', '/v1/payment-methods', { payment_method_token: 'tok_visa' })).body.data.id;
  const before = await countRows(cp, 'billing_subscription', 'user_id = ?', [user.id]);
  for (const json of [{}, { plan_id: plan.id, days: 1 }, { plan_id: plan.id, trial_end: 'tomorrow' }, { plan_id: plan.id, admin_note: 'x'.repeat(501) },
    { plan_id: plan.id, payment_method_id: 'nope' }, { plan_id: plan.id, payment_method_id: crypto.randomUUID() }, { plan_id: plan.id, current_period_end: '2020-01-01T00:00:00Z' }]) {
    t.equal((await send(admin, 'POST', base(user.id), json)).status, 400, JSON.stringify(json));
  }
  t.equal(await countRows(cp, 'billing_subscription', 'user_id = ?', [user.id]), before);
  const skipped = await send(admin, 'POST', base(user.id), { plan_id: trialPlan.id, payment_method_id: pm, trial_end: '2026-04-01T00:00:00Z' });
  t.equal(skipped.status, 201, skipped.text);
  t.match(skipped.body.data, { status: 'active', trial_end: null });
  const custom = await send(admin, 'POST', base(user.id), { plan_id: plan.id, payment_method_id: pm, current_period_end: '2026-05-20T00:00:00Z' });
  t.match(custom.body.data, { status: 'active', current_period_end: '2026-05-20T00:00:00.000Z', payment_method_last4: '4242' });
});

t.test('PATCH /v1/admin/users/{id}/subscriptions/{sid} with If-Match: stale → 412 unchanged; plan change prorated; fields audit-logged', async (t) => {
  const user = await createLoggedInUser(cp);
  const created = (await send(admin, 'POST', base(user.id), { plan_id: plan.id })).body.data;
  const url = `${base(user.id)}/${created.id}`;
  const read = await send(admin, 'GET', url);
  const etag = read.headers.get('etag')!;
  t.ok(etag);
  const ok = await send(admin, 'PATCH', url, { auto_renew: false, admin_note: 'asked by phone' }, { 'if-match': etag });
  t.equal(ok.status, 200, ok.text);
  t.match(ok.body.data, { auto_renew: false, next_billing_date: null });
  const stale = await send(admin, 'PATCH', url, { auto_renew: true }, { 'if-match': etag });
  t.equal(stale.status, 412);
  t.equal((await send(admin, 'GET', url)).body.data.auto_renew, false, 'unchanged');
  t.equal((await send(admin, 'PATCH', url, { plan_id: trialPlan.id })).body.code, 'PLAN_TYPE_MISMATCH');
  t.equal((await send(admin, 'PATCH', url, { current_period_end: '2020-01-01T00:00:00Z' })).status, 400);
  const changed = await send(admin, 'PATCH', url, { plan_id: bigger.id });
  t.equal(changed.status, 200, changed.text);
  t.match(changed.body.data, { plan_id: bigger.id, price: 16 });
  t.equal(await audits(created.id, 'subscription.updated'), 1, 'the patch of auto_renew (the plan change is its own transition)');
  t.equal(await audits(created.id, 'subscription.plan_changed'), 1);
  t.equal((await send(admin, 'PATCH', `${base(user.id)}/${crypto.randomUUID()}`, {})).status, 404);
});

t.test('POST …/pause, …/resume, …/extend, …/cancel, …/reactivate through the routes', async (t) => {
  const user = await createLoggedInUser(cp);
  const created = (await send(admin, 'POST', base(user.id), { plan_id: plan.id })).body.data;
  const url = `${base(user.id)}/${created.id}`;
  t.equal((await send(admin, 'POST', `${url}/pause`, { resume_at: '2020-01-01T00:00:00Z' })).status, 400);
  const paused = await send(admin, 'POST', `${url}/pause`, { resume_at: null, reason: 'fraud check' });
  t.match(paused.body.data, { status: 'paused', resume_at: null });
  t.ok(paused.body.data.paused_at);
  t.equal((await send(admin, 'POST', `${url}/pause`, {})).status, 409);
  clock.advance(3 * DAY);
  await relogin();
  const resumed = await send(admin, 'POST', `${url}/resume`);
  t.equal(resumed.status, 200, resumed.text);
  t.equal(resumed.body.data.status, 'active');
  t.equal(Date.parse(resumed.body.data.current_period_end) - Date.parse(created.current_period_end), 3 * DAY);
  for (const days of [0, 366, 1.5, '2']) t.equal((await send(admin, 'POST', `${url}/extend`, { days })).status, 400);
  const extended = await send(admin, 'POST', `${url}/extend`, { days: 10, reason: 'outage' });
  t.equal(Date.parse(extended.body.data.current_period_end) - Date.parse(created.current_period_end), 13 * DAY);
  t.equal((await send(admin, 'POST', `${url}/reactivate`, {})).status, 409, 'not ended');
  t.equal((await send(admin, 'POST', `${url}/cancel`, { immediate: true, reason: 'chargeback' })).body.data.status, 'canceled');
  const back = await send(admin, 'POST', `${url}/reactivate`, { admin_note: 'resolved' });
  t.equal(back.status, 200, back.text);
  t.match(back.body.data, { status: 'active', current_period_start: clock.now().toISOString() });
  for (const action of ['subscription.paused', 'subscription.resumed', 'subscription.extended', 'subscription.canceled', 'subscription.reactivated']) {
    t.equal(await audits(created.id, action), 1, action);
  }
});

t.test('GET /v1/admin/subscriptions filters by type, status, plan and creation dates, newest first; GET a user\'s list', async (t) => {
  const user = await createLoggedInUser(cp);
  clock.advance(DAY);
  await relogin();
  const from = clock.now().toISOString();
  const s = (await send(admin, 'POST', base(user.id), { plan_id: bigger.id })).body.data;
  const list = await send(admin, 'GET', `/v1/admin/subscriptions?plan_id=${bigger.id}&created_after=${encodeURIComponent(from)}&type=svod&status=active`);
  t.equal(list.status, 200, list.text);
  t.same(list.body.data.map((x: { id: string }) => x.id), [s.id]);
  t.equal((await send(admin, 'GET', '/v1/admin/subscriptions?created_before=2000-01-01T00:00:00Z')).body.meta.total, 0);
  t.equal((await send(admin, 'GET', '/v1/admin/subscriptions?plan_id=x')).status, 400);
  const all = (await send(admin, 'GET', '/v1/admin/subscriptions?limit=100')).body.data;
  t.same(all.map((x: { created_at: string }) => x.created_at), [...all.map((x: { created_at: string }) => x.created_at)].sort().reverse());
  t.equal((await send(admin, 'GET', `${base(user.id)}?status=active`)).body.meta.total, 1);
});
