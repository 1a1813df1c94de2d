// The billing clock through the real server, PostgreSQL and the durable job
// queue, with a ManualClock moved month by month (DESIGN.md §5): trial
// conversion, renewals on the plan's terms at that moment (grandfathering
// until then), declines → past_due with a payment_failed notification and
// retries, recovery, retries exhausted → canceled, cancel at period end,
// auto_renew false → expired, pause/resume, complimentary renewals, and a
// worker that dies between the charge and its commit (no double charge).
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, createLoggedInUser, createSuperadmin, login, messagesTo, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { DAY, HOUR, ManualClock, MINUTE } from '../core/clock.ts';
import { systemContext } from '../core/request-context.ts';
import type { ChargeInput, PaymentGateway } from './gateway/payment-gateway.ts';
import { Subscription } from './billing.entities.ts';
import { extendSubscription, pauseSubscription, reactivateSubscription, resumeSubscription } from './subscription-service.ts';

const clock = new ManualClock(Date.parse('2026-01-10T12:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);

const fresh = async (account: TestAccount): Promise<TestAccount> => ({ ...account, ...(await login(cp, account.email, account.password)) });
const send = async (who: TestAccount, method: string, path: string, json?: unknown) => cp.request(method, path, { headers: bearer((await fresh(who)).accessToken), json });

/** Counts what the gateway really charged, per key (a replay with a known key answers the first charge's id). */
const realGateway = cp.app.paymentGateway;
const chargesByKey = new Map<string, Set<string>>();
/** The user whose next charge fails after the gateway charged (other due renewals of the same run are charged normally). */
let failAfterCharge: string | null = null;
/** Runs while the gateway charges this user (another writer's change that commits during the charge). */
let duringCharge: { user: string; run: () => Promise<unknown> } | null = null;
cp.app.paymentGateway = {
  name: realGateway.name,
  attach: (input) => realGateway.attach(input),
  refund: (input) => realGateway.refund(input),
  detach: (id) => realGateway.detach(id),
  async charge(input: ChargeInput) {
    const result = await realGateway.charge(input);
    if (duringCharge?.user === input.customerRef) {
      const { run } = duringCharge;
      duringCharge = null;
      await run();
    }
    if (result.status === 'succeeded') {
      const ids = chargesByKey.get(input.idempotencyKey) ?? new Set();
      ids.add(result.chargeId);
      chargesByKey.set(input.idempotencyKey, ids);
    }
    if (failAfterCharge === input.customerRef) {
      failAfterCharge = null;
      throw new Error('the worker died after the charge, before its commit');
    }
    return result;
  },
} satisfies PaymentGateway;

async function createPlan(overrides: Record<string, unknown> = {}): Promise<{ id: string }> {
  const res = await send(superadmin, 'POST', '/v1/admin/plans', {
    name: 'Standard', type: 'svod', price: 10, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, ...overrides,
  });
  if (res.status !== 201) throw new Error(`create plan: ${res.status} ${res.text}`);
  return res.body.data;
}

async function subscriber(token = 'tok_visa'): Promise<TestAccount & { pm: string }> {
  const user = await createLoggedInUser(cp);
  const res = await send(user, 'POST', '/v1/payment-methods', { payment_method_token: token });
  if (res.status !== 201) throw new Error(`attach: ${res.status} ${res.text}`);
  return { ...user, pm: res.body.data.id };
}

async function attach(user: TestAccount, token: string): Promise<string> {
  return (await send(user, 'POST', '/v1/payment-methods', { payment_method_token: token })).body.data.id;
}

async function subscribe(user: TestAccount & { pm: string }, planId: string): Promise<{ id: string }> {
  const res = await send(user, 'POST', '/v1/subscriptions', { plan_id: planId, payment_method_id: user.pm });
  if (res.status !== 201) throw new Error(`subscribe: ${res.status} ${res.text}`);
  return res.body.data;
}

const sub = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_subscription where id = ?', [id]))[0]!;
const invoicesOf = (id: string) => query<Record<string, any>>(cp, 'select * from billing_invoice where subscription_id = ? order by created_at, period_start', [id]);
const iso = (d: Date | string) => new Date(d).toISOString();

/** Moves the clock and runs what became due (the recurring billing.clock job included). */
async function advance(ms: number): Promise<void> {
  clock.advance(ms);
  await cp.app.jobs.runDue();
}

/** Moves the clock to a point and runs what became due. */
async function advanceTo(when: Date | string): Promise<void> {
  clock.set(new Date(new Date(when).getTime() + MINUTE));
  await cp.app.jobs.runDue();
}

const trialPlan = await createPlan({ name: 'Trial', trial_days: 7 });
const plan = await createPlan({ name: 'Monthly' });
// The first run plans the recurring schedules (billing.clock runs from its next minute on).
await cp.app.jobs.runDue();

t.test('billing.clock: trial → active → renewal → declined renewal → past_due with a notification → recovered, all at the plan price', async (t) => {
  const me = await subscriber();
  const created = await subscribe(me, trialPlan.id);
  t.equal((await sub(created.id)).status, 'trialing');

  await advanceTo((await sub(created.id)).trial_end);
  let s = await sub(created.id);
  t.equal(s.status, 'active', 'converted at trial end');
  t.equal(iso(s.current_period_start), '2026-01-17T12:00:00.000Z');
  t.equal(iso(s.current_period_end), '2026-02-17T12:00:00.000Z');
  let invoices = await invoicesOf(created.id);
  t.match(invoices, [{ status: 'paid', billing_reason: 'subscription_cycle', amount_due_minor: '1000' }]);

  await advanceTo(s.current_period_end);
  s = await sub(created.id);
  t.equal(iso(s.current_period_end), '2026-03-17T12:00:00.000Z', 'renewed one month');
  t.equal((await invoicesOf(created.id)).length, 2);

  // The card starts declining.
  const declining = await attach(me, 'tok_chargeDeclined');
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [declining, created.id]);
  await advanceTo(s.current_period_end);
  s = await sub(created.id);
  t.equal(s.status, 'past_due');
  invoices = await invoicesOf(created.id);
  const open = invoices.at(-1)!;
  t.match(open, { status: 'open', attempt_count: 1 });
  t.equal(iso(open.next_attempt_at), iso(new Date(clock.now().getTime() + DAY)), 'retried a day later');
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [me.id]), 1);
  await cp.app.deferred.idle();

  // The user fixes the card; the retry recovers.
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [me.pm, created.id]);
  await advance(DAY);
  s = await sub(created.id);
  t.equal(s.status, 'active', 'recovered');
  t.equal(iso(s.current_period_start), '2026-03-17T12:00:00.000Z');
  t.equal(iso(s.current_period_end), '2026-04-17T12:00:00.000Z', 'the period the invoice covers');
  t.match((await invoicesOf(created.id)).at(-1), { status: 'paid', attempt_count: 2 });
  const keys = await query<{ idempotency_key: string; status: string }>(cp,
    'select idempotency_key, status from billing_invoice_charge where invoice_id = ? order by attempt', [open.id]);
  t.same(keys, [{ idempotency_key: `invoice:${open.id}:1`, status: 'declined' }, { idempotency_key: `invoice:${open.id}:2`, status: 'succeeded' }]);
});

t.test('billing.clock: retries at +1, +3, +5 days, then the invoice is uncollectible and the subscription canceled', async (t) => {
  const me = await subscriber('tok_insufficientFunds');
  const visa = await attach(me, 'tok_visa');
  const created = await subscribe({ ...me, pm: visa }, plan.id);
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [me.pm, created.id]);
  await advanceTo((await sub(created.id)).current_period_end);
  t.equal((await sub(created.id)).status, 'past_due');
  await advance(DAY);
  await advance(3 * DAY);
  t.equal((await sub(created.id)).status, 'past_due', 'three attempts so far');
  await advance(5 * DAY);
  const s = await sub(created.id);
  t.equal(s.status, 'canceled');
  const last = (await invoicesOf(created.id)).at(-1)!;
  t.match(last, { status: 'uncollectible', attempt_count: 4 });
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [me.id]), 4);
});

t.test('billing.clock: a plan price change reaches a subscriber at the renewal, not before (grandfathering)', async (t) => {
  const own = await createPlan({ name: 'Raised' });
  const me = await subscriber();
  const created = await subscribe(me, own.id);
  const put = await send(superadmin, 'PUT', `/v1/admin/plans/${own.id}`, {
    name: 'Raised', type: 'svod', price: 12.5, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 5, max_concurrent_streams: 2,
    max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true,
  });
  t.equal(put.status, 200, put.text);
  t.match(await sub(created.id), { price_minor: '1000', max_profiles: 4 }, 'kept until the renewal');
  await advance(DAY);
  t.match(await sub(created.id), { price_minor: '1000' });
  await advanceTo((await sub(created.id)).current_period_end);
  t.match(await sub(created.id), { price_minor: '1250', max_profiles: 5, status: 'active' }, 'new terms from the renewal');
  t.match((await invoicesOf(created.id)).at(-1), { amount_minor: '1250', status: 'paid' });
});

t.test('regression: a subscription\'s embedded plan shows a changed plan\'s new terms before that subscriber renews', async (t) => {
  const own = await createPlan({ name: 'Terms', max_quality: 'HD' });
  const me = await subscriber();
  const created = await subscribe(me, own.id);
  const put = await send(superadmin, 'PUT', `/v1/admin/plans/${own.id}`, {
    name: 'Terms', type: 'svod', price: 14, currency: 'EUR', billing_cycle: 'quarterly', max_profiles: 6, max_concurrent_streams: 4,
    max_devices: 10, max_quality: 'UHD_4K', has_downloads: false, has_ads: false, is_active: true,
  });
  t.equal(put.status, 200, put.text);
  const sold = { price: 10, currency: 'EUR', billing_cycle: 'monthly', max_profiles: 4, max_concurrent_streams: 2, max_devices: 5, max_quality: 'HD' };
  const admin = await createLoggedInUser(cp, { roles: ['admin', 'subscriber'] });
  const reads = async () => [
    (await send(me, 'GET', `/v1/subscriptions/${created.id}`)).body.data.plan,
    (await send(me, 'GET', '/v1/subscriptions')).body.data.find((s: { id: string }) => s.id === created.id).plan,
    (await send(admin, 'GET', `/v1/admin/users/${me.id}/subscriptions/${created.id}`)).body.data.plan,
  ];
  for (const plan of await reads()) t.match(plan, { id: own.id, name: 'Terms', ...sold }, 'the terms the subscriber has, not the plan\'s new ones');
  t.match((await send(me, 'GET', `/v1/subscriptions/${created.id}`)).body.data, { price: 10, billing_cycle: 'monthly' });

  await advanceTo((await sub(created.id)).current_period_end);
  t.equal((await sub(created.id)).status, 'active');
  const renewed = { price: 14, billing_cycle: 'quarterly', max_profiles: 6, max_concurrent_streams: 4, max_devices: 10, max_quality: 'UHD_4K' };
  for (const plan of await reads()) t.match(plan, renewed, 'the new terms from the renewal on');
});

t.test('billing.clock: cancel at period end → canceled when it ends; auto_renew false → expired; no invoice for either', async (t) => {
  const a = await subscriber();
  const b = await subscriber();
  const subA = await subscribe(a, plan.id);
  const subB = await subscribe(b, plan.id);
  const asked = clock.now();
  t.equal((await send(a, 'POST', `/v1/subscriptions/${subA.id}/cancel`, {})).status, 200);
  await query(cp, 'update billing_subscription set auto_renew = false, next_billing_date = null where id = ?', [subB.id]);
  const end = (await sub(subA.id)).current_period_end;
  clock.set(new Date(new Date(end).getTime() - MINUTE));
  await cp.app.jobs.runDue();
  t.equal((await sub(subA.id)).status, 'active', 'a minute before');
  await advance(2 * MINUTE);
  t.match(await sub(subA.id), { status: 'canceled' });
  t.equal(iso((await sub(subA.id)).canceled_at), iso(asked), 'canceled_at: when the cancellation was asked for (Stripe\'s meaning), kept');
  t.equal(iso((await sub(subA.id)).ended_at), iso(end), 'ended_at: the period end');
  t.match(await sub(subB.id), { status: 'expired' });
  t.equal((await invoicesOf(subA.id)).length, 1);
  t.equal((await invoicesOf(subB.id)).length, 1);
});

t.test('billing.clock: pause → resume extends the period by the paused time; resume_at resumes by itself; extend; reactivate', async (t) => {
  const me = await subscriber();
  const created = await subscribe(me, plan.id);
  const rc = systemContext(cp.app, { actor: { type: 'user', id: (await createLoggedInUser(cp)).id, roles: ['admin'] } });
  const end = new Date((await sub(created.id)).current_period_end);
  await pauseSubscription(cp.app, rc, await rc.em.findOneOrFail(Subscription, created.id), { resume_at: null, reason: 'support case' });
  t.equal((await sub(created.id)).status, 'paused');
  await advance(10 * DAY);
  t.equal((await sub(created.id)).status, 'paused', 'indefinite pause stays');
  const fork = systemContext(cp.app, { actor: rc.actor });
  await resumeSubscription(cp.app, fork, await fork.em.findOneOrFail(Subscription, created.id));
  let s = await sub(created.id);
  t.equal(s.status, 'active');
  t.equal(iso(s.current_period_end), iso(new Date(end.getTime() + 10 * DAY)), 'extended by the 10 paused days');
  t.equal(iso(s.next_billing_date), iso(s.current_period_end));

  const ctx2 = systemContext(cp.app, { actor: rc.actor });
  const resumeAt = new Date(clock.now().getTime() + 2 * DAY);
  await pauseSubscription(cp.app, ctx2, await ctx2.em.findOneOrFail(Subscription, created.id), { resume_at: resumeAt, reason: 'travel' });
  await advance(2 * DAY + HOUR);
  s = await sub(created.id);
  t.equal(s.status, 'active', 'resumed at resume_at');
  t.equal(iso(s.current_period_end), iso(new Date(end.getTime() + 12 * DAY + HOUR)), 'extended by the paused time up to the run');

  const ctx3 = systemContext(cp.app, { actor: rc.actor });
  await extendSubscription(cp.app, ctx3, await ctx3.em.findOneOrFail(Subscription, created.id), { days: 5, reason: 'outage' });
  t.equal(iso((await sub(created.id)).current_period_end), iso(new Date(end.getTime() + 17 * DAY + HOUR)));
  t.equal((await invoicesOf(created.id)).length, 1, 'no charge');

  await query(cp, `update billing_subscription set status = 'canceled', next_billing_date = null where id = ?`, [created.id]);
  const ctx4 = systemContext(cp.app, { actor: rc.actor });
  await reactivateSubscription(cp.app, ctx4, me.id, created.id, { admin_note: 'came back' });
  s = await sub(created.id);
  t.equal(s.status, 'active');
  t.equal(iso(s.current_period_start), iso(clock.now()), 'a new period from now');
  t.match((await invoicesOf(created.id)).at(-1), { status: 'paid', amount_paid_minor: '1000' });
});

t.test('billing.clock: a complimentary subscription renews with a zero invoice and no charge attempt', async (t) => {
  const me = await subscriber();
  const created = await subscribe(me, plan.id);
  await query(cp, 'update billing_subscription set payment_method_id = null where id = ?', [created.id]);
  await advanceTo((await sub(created.id)).current_period_end);
  const last = (await invoicesOf(created.id)).at(-1)!;
  t.match(last, { status: 'paid', amount_minor: '1000', discount_minor: '1000', amount_due_minor: '0', attempt_count: 0 });
  t.equal(await countRows(cp, 'billing_invoice_charge', 'invoice_id = ?', [last.id]), 0);
  t.equal((await sub(created.id)).status, 'active');
});

t.test('billing.clock: a worker that dies after the charge and before its commit does not charge twice when rerun', async (t) => {
  const me = await subscriber();
  const created = await subscribe(me, plan.id);
  failAfterCharge = me.id;
  await advanceTo((await sub(created.id)).current_period_end);
  t.equal(failAfterCharge, null, 'the failure happened');
  const open = (await invoicesOf(created.id)).at(-1)!;
  t.equal(open.status, 'open', 'invoice persisted open before the charge');
  const pending = await query<{ idempotency_key: string; status: string }>(cp, 'select idempotency_key, status from billing_invoice_charge where invoice_id = ?', [open.id]);
  t.same(pending, [{ idempotency_key: `invoice:${open.id}:1`, status: 'pending' }]);
  // The lease passes; the next run takes the attempt over with the same key.
  await advance(11 * MINUTE);
  await advance(MINUTE);
  t.match((await invoicesOf(created.id)).at(-1), { id: open.id, status: 'paid' });
  t.equal((await sub(created.id)).status, 'active');
  t.equal(chargesByKey.get(`invoice:${open.id}:1`)?.size, 1, 'one real charge for the key');
  t.equal(await countRows(cp, 'billing_invoice_charge', 'invoice_id = ?', [open.id]), 1);
  t.equal((await invoicesOf(created.id)).length, 2, 'one renewal invoice');
});

t.test('billing.clock: a renewal paid after the subscription was canceled during its charge leaves it canceled', async (t) => {
  const me = await subscriber();
  const created = await subscribe(me, plan.id);
  const before = await sub(created.id);
  // The subscriber's cancellation commits while the gateway charges the renewal.
  duringCharge = { user: me.id, run: () => query(cp, `update billing_subscription set status = 'canceled', canceled_at = ?, ended_at = ? where id = ?`, [clock.now(), clock.now(), created.id]) };
  await advanceTo(before.current_period_end);
  t.equal(duringCharge, null, 'the renewal was charged');
  const s = await sub(created.id);
  t.equal(s.status, 'canceled', 'not made active again: a renewal leaves only from active, trialing or past_due');
  t.equal(iso(s.current_period_end), iso(before.current_period_end), 'its period did not move');
});

t.test('billing.clock: the payment_failed notification commits with the declined settle, and its e-mail goes only after the commit', async (t) => {
  const me = await subscriber('tok_insufficientFunds');
  const visa = await attach(me, 'tok_visa');
  const created = await subscribe({ ...me, pm: visa }, plan.id);
  await query(cp, 'update billing_subscription set payment_method_id = ? where id = ?', [me.pm, created.id]);
  const before = (await messagesTo(cp, me.email)).length;
  // The notification cannot be stored for this user: the settle of the decline must roll back with it.
  await query(cp, `create function refuse_notification_fn() returns trigger language plpgsql as $$
    begin if new.user_id = '${me.id}' then raise exception 'notification refused'; end if; return new; end $$`);
  await query(cp, 'create trigger refuse_notification before insert on notification for each row execute function refuse_notification_fn()');
  try {
    await advanceTo((await sub(created.id)).current_period_end);
  } finally {
    await query(cp, 'drop trigger refuse_notification on notification');
    await query(cp, 'drop function refuse_notification_fn()');
  }
  const open = (await invoicesOf(created.id)).at(-1)!;
  t.match(open, { status: 'open', attempt_count: 0 }, 'the decline was not settled without its notification');
  t.same(await query(cp, 'select status from billing_invoice_charge where invoice_id = ?', [open.id]), [{ status: 'pending' }]);
  t.equal((await sub(created.id)).status, 'active', 'not past_due yet');
  t.equal(await countRows(cp, 'notification', 'user_id = ?', [me.id]), 0);
  t.equal((await messagesTo(cp, me.email)).length, before, 'no e-mail for a settle that rolled back');

  // The lease passes; the attempt is taken over with its key and settled with its notification, once.
  await advance(11 * MINUTE);
  await advance(MINUTE);
  t.match((await invoicesOf(created.id)).at(-1), { id: open.id, status: 'open', attempt_count: 1 });
  t.equal((await sub(created.id)).status, 'past_due');
  t.same(await query(cp, 'select status, decline_reason from billing_invoice_charge where invoice_id = ?', [open.id]), [{ status: 'declined', decline_reason: 'insufficient_funds' }]);
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [me.id]), 1);
  t.equal((await messagesTo(cp, me.email)).length, before + 1, 'its e-mail, after the commit');
});
