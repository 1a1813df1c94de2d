// The money of plan changes through the real server on PostgreSQL (issue 20,
// items 1 and 2): the credit for unused time is what was paid for it (net of
// coupons, tax included), a downgrade's invoice adds up from its lines and
// gives its negative total to the balance, and the preview is priced by the
// same function as the change's invoice, the account balance included.
import t, { type Test } from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createAdmin, createSuperadmin, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { attachCard, createTestPlan, relogin as reloginAll, storedBalance, subscribeWithCard, subscriberWithCard, type Subscriber } from '../../../test/support/billing.ts';
import { DAY, ManualClock, SECOND } from '../core/clock.ts';
import { systemContext } from '../core/request-context.ts';
import { creditBalance } from './balance-service.ts';

const clock = new ManualClock(Date.parse('2026-06-01T00:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);

const send = (who: TestAccount, method: string, path: string, json?: unknown) => cp.request(method, path, { headers: bearer(who.accessToken), json });
const createPlan = (name: string, price: number) => createTestPlan(cp, superadmin, { name, price });
const subscriber = (token?: string) => subscriberWithCard(cp, token);
const subscribe = (who: Subscriber, planId: string) => subscribeWithCard(cp, who, planId);
const balanceOf = (userId: string) => storedBalance(cp, userId);
const relogin = (...accounts: TestAccount[]) => reloginAll(cp, ...accounts);

/** What the card was charged, all invoices of the user together (minor units). */
const cardPaid = async (userId: string) =>
  Number((await query<{ n: string }>(cp, `select coalesce(sum(amount_paid_minor), 0) as n from billing_invoice where user_id = ? and status = 'paid'`, [userId]))[0]!.n);
const latestInvoice = async (who: TestAccount) => (await send(who, 'GET', '/v1/invoices?limit=1')).body.data[0];

/** Every invoice's totals add up from its lines (decision "Invoices"): amount = Σ lines, and amount − discount + tax − applied + credit = due. */
function addsUp(t: Test, invoice: Record<string, any>): void {
  const cents = (n: number) => Math.round(n * 100);
  const lines = invoice.line_items.reduce((sum: number, l: { amount: number }) => sum + cents(l.amount), 0);
  t.equal(cents(invoice.amount), lines, `${invoice.invoice_number}: amount is the sum of its lines`);
  t.equal(cents(invoice.total), cents(invoice.amount) - cents(invoice.discount_amount) + cents(invoice.tax_amount), 'total = amount − discount + tax');
  t.equal(cents(invoice.amount_due), cents(invoice.total) - cents(invoice.balance_applied) + cents(invoice.balance_credit), 'due = total − applied + credit');
}

let couponSeq = 0;
async function createCoupon(percent: number): Promise<{ code: string }> {
  const res = await send(admin, 'POST', '/v1/admin/coupons', {
    code: `PCM${process.pid}X${++couponSeq}`, discount_type: 'percent', discount_value: percent, max_redemptions_per_user: null,
  });
  if (res.status !== 201) throw new Error(`create coupon: ${res.status} ${res.text}`);
  return res.body.data;
}

const basic = await createPlan('Basic', 5);
const premium = await createPlan('Premium', 20);

t.test('regression: coupon on upgrade turns a downgrade into free balance', async (t) => {
  // Basic 5 → Premium 20 with 50 % and straight back, 20 times: the downgrade used to credit the undiscounted 15 (7.5 of balance per cycle).
  const me = await subscriber();
  const sub = await subscribe(me, basic.id);
  const coupon = await createCoupon(50);
  for (let cycle = 0; cycle < 20; cycle++) {
    const up = await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: premium.id, coupon_code: coupon.code });
    t.equal(up.status, 200, up.text);
    addsUp(t, await latestInvoice(me));
    const down = await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: basic.id });
    t.equal(down.status, 200, down.text);
    addsUp(t, await latestInvoice(me));
    t.ok(await balanceOf(me.id) <= await cardPaid(me.id), `cycle ${cycle}: the balance never exceeds what the card paid`);
  }
  // 5 for Basic; the first upgrade: Premium at 50 % is 10 for the period, 5 credited, 5 charged; each downgrade gives
  // back what Premium was paid (10) less Basic's 5; each later upgrade takes those 5 from the balance.
  t.equal(await cardPaid(me.id), 1000, 'the card paid 5 + 5');
  t.equal(await balanceOf(me.id), 500, 'the balance holds the 5 the last downgrade gave back, nothing more');
  const [upgrade] = (await query<{ amount_minor: string; discount_minor: string; balance_applied_minor: string; amount_due_minor: string }>(cp,
    `select amount_minor, discount_minor, balance_applied_minor, amount_due_minor from billing_invoice
     where subscription_id = ? and billing_reason = 'subscription_update' order by created_at desc, amount_minor desc limit 1`, [sub.id]));
  t.match(upgrade, { amount_minor: '1500', discount_minor: '1000', balance_applied_minor: '500', amount_due_minor: '0' }, 'the coupon takes 50 % off Premium\'s 20, not off the net');
});

t.test('regression: a downgrade invoice reads amount 0 while its lines sum below it', async (t) => {
  const me = await subscriber();
  const sub = await subscribe(me, premium.id);
  clock.advance(10 * DAY);
  await relogin(me, admin, superadmin);
  const preview = (await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: basic.id })).body.data;
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: basic.id })).status, 200);
  const invoice = await latestInvoice(me);
  addsUp(t, invoice);
  t.ok(invoice.amount < 0, `the credit shows in the amount (${invoice.amount})`);
  t.equal(invoice.total, invoice.amount, 'no coupon, no tax');
  t.equal(invoice.balance_credit, -invoice.total, 'the negative total goes to the balance');
  t.equal(invoice.amount_due, 0);
  t.equal(await balanceOf(me.id), Math.round(invoice.balance_credit * 100), 'and the balance holds it');
  t.same([preview.total, preview.balance_credit, preview.amount_due_now], [invoice.total, invoice.balance_credit, invoice.amount_due], 'the preview said so');
});

t.test('regression: the preview ignores the balance the change then applies', async (t) => {
  const me = await subscriber();
  const sub = await subscribe(me, basic.id);
  await creditBalance(systemContext(cp.app), { userId: me.id, currency: 'EUR', amountMinor: 400, source: 'adjustment' });
  const coupon = await createCoupon(10);
  const body = { plan_id: premium.id, coupon_code: coupon.code };
  clock.advance(SECOND); // the change's invoice is the newest
  const preview = await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, body);
  t.equal(preview.status, 200, preview.text);
  t.equal(preview.body.data.balance_applied, 4, 'the balance pays first');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, body)).status, 200);
  const invoice = await latestInvoice(me);
  addsUp(t, invoice);
  const p = preview.body.data;
  t.same(
    [p.amount_due_now, p.balance_applied, p.discount_amount, p.tax_amount, p.total, p.balance_credit, p.proration_credit, p.proration_charge],
    [invoice.amount_due, invoice.balance_applied, invoice.discount_amount, invoice.tax_amount, invoice.total, invoice.balance_credit, -invoice.line_items[0].amount, invoice.line_items[1].amount],
    'preview == invoice',
  );
  t.equal(invoice.amount_paid, p.amount_due_now, 'the card was charged what the preview said');
  t.equal(await balanceOf(me.id), 0);
});

t.test('regression: a downgrade credits the net price of the unused time but not the tax paid on it', async (t) => {
  await query(cp, `insert into billing_tax_rate (country, rate_bp, updated_at) values ('FR', 2000, now()) on conflict (country) do update set rate_bp = 2000`);
  t.teardown(() => query(cp, `delete from billing_tax_rate where country = 'FR'`));
  const me = await subscriber('tok_fr');
  const sub = await subscribe(me, premium.id);
  t.match(await latestInvoice(me), { amount: 20, tax_amount: 4, amount_paid: 24 });
  clock.advance(SECOND); // the change's invoice is the newest (a second of 2.6 million leaves every share at the cent)
  const preview = (await send(me, 'POST', `/v1/subscriptions/${sub.id}/preview`, { plan_id: basic.id })).body.data;
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: basic.id })).status, 200);
  const invoice = await latestInvoice(me);
  addsUp(t, invoice);
  // The whole period unused: 20 + 4 tax paid come back, Basic's 5 + 1 tax are taken from them.
  t.match(invoice, { amount: -15, tax_amount: -3, total: -18, balance_credit: 18, amount_due: 0 });
  t.equal(await balanceOf(me.id), 1800, 'the tax paid on the unused time came back with it');
  t.match(preview, { tax_amount: -3, total: -18, balance_credit: 18, amount_due_now: 0 });
  // Back up at once: Basic's 5 + 1 are credited, Premium's 20 + 4 charged; the balance pays all of the 18.
  clock.advance(SECOND);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/change-plan`, { plan_id: premium.id })).status, 200);
  const up = await latestInvoice(me);
  addsUp(t, up);
  t.match(up, { amount: 15, tax_amount: 3, total: 18, balance_applied: 18, amount_due: 0 });
  t.equal(await balanceOf(me.id), 0);
  t.equal(await cardPaid(me.id), 2400, 'the card paid once, 24');
});

t.test('regression: voiding an invoice the balance had paid part of keeps that balance', async (t) => {
  // A renewal takes the balance first; if the subscription is then canceled, the void gives it back.
  const me = await subscriber('tok_chargeDeclined');
  const visa = await attachCard(cp, me, 'tok_visa');
  const sub = await subscribe({ ...me, pm: visa }, basic.id);
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [me.pm, sub.id]);
  await creditBalance(systemContext(cp.app), { userId: me.id, currency: 'EUR', amountMinor: 200, source: 'adjustment' });
  await cp.app.jobs.runDue();
  const end = (await query<{ e: Date }>(cp, 'select current_period_end as e from billing_subscription where id = ?', [sub.id]))[0]!.e;
  clock.set(new Date(new Date(end).getTime() + 60_000));
  await cp.app.jobs.runDue();
  await relogin(me, admin, superadmin);
  const open = await latestInvoice(me);
  t.match(open, { status: 'open', balance_applied: 2, amount_due: 3 });
  t.equal(await balanceOf(me.id), 0);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${sub.id}/cancel`, { immediate: true })).status, 200);
  t.equal((await send(me, 'GET', `/v1/invoices/${open.id}`)).body.data.status, 'void');
  t.equal(await balanceOf(me.id), 200, 'the 2 the void undid are back in the balance');
});
