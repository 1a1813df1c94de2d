// Subscriptions and invoices of a subscriber through the real server on
// PostgreSQL and Redis (document 1 §3, §4.3, §4.5; DESIGN.md §5): create
// (trial or first invoice paid now), the one-live-per-type rule under
// concurrency, declines that leave nothing behind, coupons and the balance,
// proration to the minor unit (EUR and JPY) equal to the preview, cancel,
// invoice reads and gapless invoice numbers.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, countRows, createAdmin, createLoggedInUser, createSuperadmin, login, query, RELAXED_LIMITS, type TestAccount,
} from '../../../test/support/auth.ts';
import { DAY, HOUR, ManualClock, SECOND } from '../core/clock.ts';
import { creditBalance } from './balance-service.ts';
import { systemContext } from '../core/request-context.ts';
import { prorate } from './money.ts';

const clock = new ManualClock(Date.parse('2026-03-01T00:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);

const send = (who: TestAccount | null, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request(method, path, { headers: who ? bearer(who.accessToken, headers) : headers, json });

async function createPlan(overrides: Record<string, unknown> = {}): Promise<{ id: string; price: number; currency: string; type: string }> {
  const res = await send(await fresh(superadmin), 'POST', '/v1/admin/plans', {
    name: 'Standard', type: 'svod', price: 9.99, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, ...overrides,
  });
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data;
}

/** The account with a token issued by the current (moved) clock. */
async function fresh(account: TestAccount): Promise<TestAccount> {
  return { ...account, ...(await login(cp, account.email, account.password)) };
}

async function subscriber(token = 'tok_visa'): Promise<TestAccount & { pm: string }> {
  const user = await createLoggedInUser(cp);
  const res = await send(user, 'POST', '/v1/payment-methods', { payment_method_token: token });
  if (res.status !== 201) throw new Error(`attach: ${res.status} ${res.text}`);
  return { ...user, pm: res.body.data.id };
}

const subscribe = (who: TestAccount & { pm: string }, planId: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  send(who, 'POST', '/v1/subscriptions', { plan_id: planId, payment_method_id: who.pm, ...extra }, headers);

/** Rows a refused operation must leave unchanged. */
async function billingCounts(userId: string) {
  return {
    subscriptions: await countRows(cp, 'billing_subscription', 'user_id = ?', [userId]),
    invoices: await countRows(cp, 'billing_invoice', 'user_id = ?', [userId]),
    charges: (await query<{ n: number }>(cp, 'select count(*)::int as n from billing_invoice_charge c join billing_invoice i on i.id = c.invoice_id where i.user_id = ?', [userId]))[0]!.n,
    redemptions: await countRows(cp, 'billing_coupon_redemption', 'user_id = ?', [userId]),
    balance_entries: await countRows(cp, 'billing_balance_entry', 'user_id = ?', [userId]),
    counter: (await query<{ n: number }>(cp, 'select coalesce(sum(last_number), 0)::int as n from billing_invoice_counter'))[0]!.n,
  };
}

let couponSeq = 0;
async function createCoupon(json: Record<string, unknown>): Promise<{ id: string; code: string }> {
  const res = await send(admin, 'POST', '/v1/admin/coupons', { code: `SUB${process.pid}X${++couponSeq}`, discount_type: 'percent', discount_value: 10, ...json });
  if (res.status !== 201) throw new Error(`create coupon: ${res.status} ${res.text}`);
  return res.body.data;
}

const standard = await createPlan();
const premium = await createPlan({ name: 'Premium', price: 17.99 });
const trialPlan = await createPlan({ name: 'Trial', type: 'live', trial_days: 14 });
const addon = await createPlan({ name: 'Sports', type: 'addon', price: 4.99 });

t.test('POST /v1/subscriptions without a trial charges the first invoice now: active, 201, invoice paid and numbered', async (t) => {
  const me = await subscriber();
  const res = await subscribe(me, standard.id);
  t.equal(res.status, 201, res.text);
  const sub = res.body.data;
  t.match(sub, {
    plan_id: standard.id, type: 'svod', status: 'active', auto_renew: true, cancel_at_period_end: false, payment_method_id: me.pm,
    payment_method_last4: '4242', plan: { id: standard.id, price: 9.99 }, price: 9.99, currency: 'EUR', trial_start: null, trial_end: null,
    current_period_start: '2026-03-01T00:00:00.000Z', current_period_end: '2026-04-01T00:00:00.000Z', next_billing_date: '2026-04-01T00:00:00.000Z',
  });
  t.equal(res.headers.get('location'), `/v1/subscriptions/${sub.id}`);
  t.ok(res.headers.get('etag'));
  const invoices = await send(me, 'GET', '/v1/invoices');
  t.equal(invoices.status, 200);
  t.equal(invoices.body.data.length, 1);
  const invoice = invoices.body.data[0];
  t.match(invoice, {
    subscription_id: sub.id, status: 'paid', billing_reason: 'subscription_create', amount: 9.99, discount_amount: 0, tax_amount: 0, amount_due: 9.99,
    amount_paid: 9.99, currency: 'EUR', period_start: '2026-03-01T00:00:00.000Z', period_end: '2026-04-01T00:00:00.000Z',
    line_items: [{ quantity: 1, unit_price: 9.99, amount: 9.99, type: 'subscription' }],
  });
  t.match(invoice.invoice_number, /^INV-2026-\d{6}$/);
  t.same((await send(me, 'GET', `/v1/invoices/${invoice.id}`)).body.data, invoice);
  t.equal(await countRows(cp, 'billing_invoice_charge', `invoice_id = ? and status = 'succeeded' and idempotency_key = ?`, [invoice.id, `invoice:${invoice.id}:1`]), 1);
  t.equal((await send(me, 'GET', `/v1/subscriptions/${sub.id}`)).body.data.id, sub.id);
  t.equal(await countRows(cp, 'audit_log', `action = 'subscription.created' and resource_id = ?`, [sub.id]), 1);
});

t.test('POST /v1/subscriptions on a plan with trial days starts trialing without a charge', async (t) => {
  const me = await subscriber();
  const res = await subscribe(me, trialPlan.id);
  t.equal(res.status, 201, res.text);
  t.match(res.body.data, { status: 'trialing', type: 'live', trial_start: '2026-03-01T00:00:00.000Z', trial_end: '2026-03-15T00:00:00.000Z', current_period_end: '2026-03-15T00:00:00.000Z', next_billing_date: '2026-03-15T00:00:00.000Z' });
  t.equal(await countRows(cp, 'billing_invoice', 'user_id = ?', [me.id]), 0, 'no invoice during the trial');
});

t.test('POST /v1/subscriptions refuses a second svod with 409 SUBSCRIPTION_EXISTS; another type is fine', async (t) => {
  const me = await subscriber();
  t.equal((await subscribe(me, standard.id)).status, 201);
  const before = await billingCounts(me.id);
  const second = await subscribe(me, premium.id);
  t.equal(second.status, 409);
  t.equal(second.body.code, 'SUBSCRIPTION_EXISTS');
  t.same(await billingCounts(me.id), before, 'nothing changed');
  t.equal((await subscribe(me, addon.id)).status, 201, 'an addon beside the svod');
});

t.test('POST /v1/subscriptions 20 at once of one type: exactly one subscription and one charge', async (t) => {
  const me = await subscriber();
  const results = await Promise.all(Array.from({ length: 20 }, () => subscribe(me, standard.id)));
  t.same(results.map((r) => r.status).sort(), [201, ...Array(19).fill(409)]);
  t.equal(await countRows(cp, 'billing_subscription', 'user_id = ?', [me.id]), 1);
  t.equal(await countRows(cp, 'billing_invoice', 'user_id = ?', [me.id]), 1);
});

t.test('POST /v1/subscriptions with a declining card is a 402 and creates nothing (no subscription, redemption, balance debit or number)', async (t) => {
  const me = await subscriber('tok_chargeDeclined');
  await creditBalance(systemContext(cp.app), { userId: me.id, currency: 'EUR', amountMinor: 300, source: 'adjustment' });
  const coupon = await createCoupon({ discount_value: 10 });
  const before = await billingCounts(me.id);
  const res = await subscribe(me, standard.id, { coupon_code: coupon.code });
  t.equal(res.status, 402, res.text);
  t.match(res.body, { code: 'PAYMENT_FAILED', decline_code: 'card_declined' });
  t.same(await billingCounts(me.id), before, 'nothing kept, no invoice number taken');
  t.equal(Number((await query<{ b: string }>(cp, 'select balance_minor as b from billing_account_balance where user_id = ?', [me.id]))[0]!.b), 300, 'balance untouched');
  t.equal((await query<{ n: number }>(cp, 'select redemption_count as n from billing_coupon where id = ?', [coupon.id]))[0]!.n, 0);
});

t.test('invoice numbers stay gapless across a declined, rolled-back attempt', async (t) => {
  const ok1 = await subscriber();
  const bad = await subscriber('tok_insufficientFunds');
  const ok2 = await subscriber();
  t.equal((await subscribe(ok1, standard.id)).status, 201);
  t.equal((await subscribe(bad, standard.id)).status, 402);
  t.equal((await subscribe(ok2, standard.id)).status, 201);
  const numbers = (await query<{ invoice_number: string }>(cp, `select invoice_number from billing_invoice where invoice_number is not null order by invoice_number`)).map((r) => Number(r.invoice_number.slice(9)));
  t.same(numbers, numbers.map((_, i) => i + 1), 'INV-2026-000001 … without a gap');
});

t.test('POST /v1/subscriptions applies the balance first and a coupon, redeemed once', async (t) => {
  const me = await subscriber();
  await creditBalance(systemContext(cp.app), { userId: me.id, currency: 'EUR', amountMinor: 500, source: 'adjustment' });
  const coupon = await createCoupon({ discount_value: 20 });
  const res = await subscribe(me, standard.id, { coupon_code: coupon.code.toLowerCase() });
  t.equal(res.status, 201, res.text);
  t.equal(res.body.data.coupon_id, coupon.id);
  const [invoice] = (await send(me, 'GET', '/v1/invoices')).body.data;
  // 9.99 − 20 % (2.00 half up) = 7.99; balance 5.00 first; the card 2.99.
  t.match(invoice, { amount: 9.99, discount_amount: 2, balance_applied: 5, amount_due: 2.99, amount_paid: 2.99, status: 'paid' });
  t.equal(await countRows(cp, 'billing_coupon_redemption', 'coupon_id = ? and user_id = ?', [coupon.id, me.id]), 1);
});

t.test('POST /v1/subscriptions: 20 users at once with one coupon redemption left give one redemption', async (t) => {
  const coupon = await createCoupon({ max_redemptions: 1, discount_value: 50 });
  const users = await Promise.all(Array.from({ length: 20 }, () => subscriber()));
  const results = await Promise.all(users.map((u) => subscribe(u, standard.id, { coupon_code: coupon.code })));
  t.equal(results.filter((r) => r.status === 201).length, 1, results.map((r) => r.status).join(','));
  t.equal(results.filter((r) => r.status === 400 && r.body.error_code === 'max_redemptions_reached').length, 19);
  t.equal(await countRows(cp, 'billing_coupon_redemption', 'coupon_id = ?', [coupon.id]), 1);
  t.equal(await countRows(cp, 'billing_subscription', `user_id in (${users.map(() => '?').join(',')})`, users.map((u) => u.id)), 1);
});

t.test('POST /v1/subscriptions refusals: bad input, unknown or deactivated plan, another user\'s method, expired coupon — nothing changes', async (t) => {
  const me = await subscriber();
  const other = await subscriber();
  const retired = await createPlan({ name: 'Retired' });
  t.equal((await send(await fresh(superadmin), 'DELETE', `/v1/admin/plans/${retired.id}`)).status, 200);
  const expiring = await createCoupon({ valid_until: new Date(clock.now().getTime() + HOUR).toISOString() });
  const before = await billingCounts(me.id);
  const cases: [unknown, number, string?][] = [
    [{}, 400, 'plan_id'],
    [{ plan_id: 'nope', payment_method_id: me.pm }, 400, 'plan_id'],
    [{ plan_id: standard.id }, 400, 'payment_method_id'],
    [{ plan_id: standard.id, payment_method_id: me.pm, extra: 1 }, 400],
    [{ plan_id: standard.id, payment_method_id: me.pm, coupon_code: 'x'.repeat(51) }, 400, 'coupon_code'],
    [{ plan_id: standard.id, payment_method_id: other.pm }, 400, 'payment_method_id'],
    [{ plan_id: crypto.randomUUID(), payment_method_id: me.pm }, 404],
    [{ plan_id: retired.id, payment_method_id: me.pm }, 409],
    [{ plan_id: standard.id, payment_method_id: me.pm, coupon_code: 'NO-SUCH-CODE' }, 400, 'coupon_code'],
  ];
  for (const [json, status, field] of cases) {
    const res = await send(me, 'POST', '/v1/subscriptions', json);
    t.equal(res.status, status, `${JSON.stringify(json)}: ${res.text}`);
    if (field) t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), `error on ${field}`);
  }
  clock.advance(2 * HOUR);
  const late = await fresh(me);
  const expired = await send(late, 'POST', '/v1/subscriptions', { plan_id: standard.id, payment_method_id: me.pm, coupon_code: expiring.code });
  t.equal(expired.status, 400);
  t.equal(expired.body.error_code, 'expired');
  t.same(await billingCounts(me.id), before, 'nothing changed');
});

t.test('POST /v1/subscriptions with an Idempotency-Key replays the first answer', async (t) => {
  const me = await subscriber();
  const key = crypto.randomUUID();
  const first = await subscribe(me, addon.id, {}, { 'idempotency-key': key });
  const again = await subscribe(me, addon.id, {}, { 'idempotency-key': key });
  t.equal(first.status, 201);
  t.equal(again.status, 201);
  t.equal(again.body.data.id, first.body.data.id);
  t.equal(await countRows(cp, 'billing_invoice', 'user_id = ?', [me.id]), 1);
});

/** Exact proration: whole and unused seconds of the period, credit at the sold price, charge at the new one. */
function expected(soldMinor: number, newMinor: number, periodStart: string, periodEnd: string, now: Date) {
  const whole = (Date.parse(periodEnd) - Date.parse(periodStart)) / SECOND;
  const unused = Math.floor((Date.parse(periodEnd) - now.getTime()) / SECOND);
  const credit = prorate(soldMinor, unused, whole);
  const charge = prorate(newMinor, unused, whole);
  return { credit, charge };
}

t.test('POST /v1/subscriptions/{id}/change-plan prorates to the second in EUR (upgrade, then downgrade to the balance) and equals the preview', async (t) => {
  let me = await subscriber();
  const sub = (await subscribe(me, standard.id)).body.data;
  clock.advance(10 * DAY + 3 * HOUR + 17 * SECOND);
  me = { ...me, ...(await fresh(me)) };
  const now = clock.now();
  const up = expected(999, 1799, sub.current_period_start, sub.current_period_end, now);
  const preview = await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: premium.id });
  t.equal(preview.status, 200, preview.text);
  t.match(preview.body.data, { from_plan_id: standard.id, to_plan_id: premium.id, currency: 'EUR', effective: 'immediate',
    proration_credit: up.credit / 100, amount_due_now: (up.charge - up.credit) / 100 });
  const invoicesBefore = await countRows(cp, 'billing_invoice', 'user_id = ?', [me.id]);
  t.equal(invoicesBefore, 1, 'the preview committed nothing');
  const changed = await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: premium.id });
  t.equal(changed.status, 200, changed.text);
  t.match(changed.body.data, { plan_id: premium.id, price: 17.99, current_period_end: sub.current_period_end, status: 'active' });
  const [invoice] = (await send(me, 'GET', '/v1/invoices?limit=1')).body.data;
  t.match(invoice, { billing_reason: 'subscription_update', status: 'paid', amount_due: preview.body.data.amount_due_now, amount_paid: preview.body.data.amount_due_now,
    line_items: [{ type: 'proration', amount: -up.credit / 100 }, { type: 'proration', amount: up.charge / 100 }] });

  // Downgrade a day later: the credit (at 17.99) exceeds the charge (at 9.99); the difference goes to the balance.
  clock.advance(DAY);
  me = { ...me, ...(await fresh(me)) };
  const down = expected(1799, 999, sub.current_period_start, sub.current_period_end, clock.now());
  const previewDown = (await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: standard.id })).body.data;
  t.match(previewDown, { proration_credit: down.credit / 100, amount_due_now: 0, balance_credit: (down.credit - down.charge) / 100 });
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: standard.id })).status, 200);
  const balance = await query<{ b: string }>(cp, `select balance_minor as b from billing_account_balance where user_id = ? and currency = 'EUR'`, [me.id]);
  t.equal(Number(balance[0]!.b), down.credit - down.charge, 'negative net credited to the balance');
});

t.test('POST /v1/subscriptions/{id}/change-plan prorates exactly in JPY (no minor unit)', async (t) => {
  const basic = await createPlan({ name: 'JP Basic', type: 'ppv', currency: 'JPY', price: 990 });
  const plus = await createPlan({ name: 'JP Plus', type: 'ppv', currency: 'JPY', price: 1990 });
  let me = await subscriber();
  const sub = (await subscribe(me, basic.id)).body.data;
  clock.advance(7 * DAY + 11 * HOUR + 1 * SECOND);
  me = { ...me, ...(await fresh(me)) };
  const up = expected(990, 1990, sub.current_period_start, sub.current_period_end, clock.now());
  const preview = (await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: plus.id })).body.data;
  t.same([preview.proration_credit, preview.amount_due_now], [up.credit, up.charge - up.credit]);
  t.ok(Number.isInteger(preview.amount_due_now), 'whole yen');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: plus.id })).status, 200);
  const [invoice] = (await send(me, 'GET', '/v1/invoices?limit=1')).body.data;
  t.equal(invoice.amount_paid, preview.amount_due_now, 'charged what the preview showed');
  t.equal(invoice.currency, 'JPY');
});

t.test('POST /v1/subscriptions/{id}/change-plan refuses another type (409 PLAN_TYPE_MISMATCH), a deactivated plan and bad input, changing nothing', async (t) => {
  const me = await subscriber();
  const sub = (await subscribe(me, standard.id)).body.data;
  const row = async () => (await query(cp, 'select plan_id, price_minor, version from billing_subscription where id = ?', [sub.id]))[0];
  const before = { row: await row(), counts: await billingCounts(me.id) };
  const cross = await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: addon.id });
  t.equal(cross.status, 409);
  t.equal(cross.body.code, 'PLAN_TYPE_MISMATCH');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: addon.id })).body.code, 'PLAN_TYPE_MISMATCH');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, {})).status, 400);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: 'x' })).status, 400);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: standard.id })).status, 409, 'same plan');
  const other = await subscriber();
  t.equal((await send(other, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: premium.id })).status, 404, 'not the owner');
  t.equal((await send(other, 'GET', `/v1/subscriptions/${sub.id}`)).status, 404);
  t.same({ row: await row(), counts: await billingCounts(me.id) }, before);
});

t.test('POST /v1/subscriptions/{id}/change-plan with a declining card is a 402 and keeps the old plan', async (t) => {
  const me = await subscriber();
  const sub = (await subscribe(me, standard.id)).body.data;
  const declining = await send(me, 'POST', '/v1/payment-methods', { payment_method_token: 'tok_chargeDeclined', set_as_default: true });
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [declining.body.data.id, sub.id]);
  const before = await billingCounts(me.id);
  const res = await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: premium.id });
  t.equal(res.status, 402);
  t.same(await billingCounts(me.id), before);
  t.equal((await send(me, 'GET', `/v1/subscriptions/${sub.id}`)).body.data.plan_id, standard.id);
});

t.test('POST /v1/subscriptions/{id}/cancel: at period end by default, immediate ends it now (audit-logged with the reason); ended is a 409', async (t) => {
  const me = await subscriber();
  const sub = (await subscribe(me, standard.id)).body.data;
  const later = await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, {});
  t.equal(later.status, 200, later.text);
  t.match(later.body.data, { status: 'active', cancel_at_period_end: true, next_billing_date: null });
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, { immediate: 'yes' })).status, 400);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, { reason: 'x'.repeat(501) })).status, 400);
  const now = await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, { immediate: true, reason: 'moving abroad' });
  t.match(now.body.data, { status: 'canceled', cancel_at_period_end: false });
  t.ok(now.body.data.canceled_at);
  const audit = await query<{ metadata: any }>(cp, `select metadata from audit_log where action = 'subscription.canceled' and resource_id = ? order by created_at desc limit 1`, [sub.id]);
  t.equal(audit[0]!.metadata.reason, 'moving abroad');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, { immediate: true })).status, 409);
  t.equal((await subscribe(me, standard.id)).status, 201, 'a new svod once the old one ended');
});

t.test('GET /v1/subscriptions and GET /v1/invoices filter and page; another user\'s invoice is a 404', async (t) => {
  const me = await subscriber();
  await subscribe(me, standard.id);
  clock.advance(SECOND);
  await subscribe(me, addon.id);
  const all = await send(me, 'GET', '/v1/subscriptions?limit=1');
  t.equal(all.body.meta.total, 2);
  t.equal(all.body.data.length, 1);
  t.equal(all.body.data[0].type, 'addon', 'newest first');
  const next = await send(me, 'GET', `/v1/subscriptions?limit=1&cursor=${all.body.meta.next_cursor}`);
  t.equal(next.body.data[0].type, 'svod');
  t.equal((await send(me, 'GET', '/v1/subscriptions?type=svod&status=active')).body.meta.total, 1);
  t.equal((await send(me, 'GET', '/v1/subscriptions?status=bogus')).status, 400);
  t.equal((await send(me, 'GET', '/v1/invoices?status=draft')).status, 400);
  t.equal((await send(me, 'GET', '/v1/invoices?status=paid')).body.meta.total, 2);
  t.equal((await send(me, 'GET', '/v1/invoices?status=open')).body.meta.total, 0);
  const invoice = (await send(me, 'GET', '/v1/invoices')).body.data[0];
  const other = await subscriber();
  t.equal((await send(other, 'GET', `/v1/invoices/${invoice.id}`)).status, 404);
  t.equal((await send(other, 'GET', '/v1/invoices')).body.meta.total, 0);
});
