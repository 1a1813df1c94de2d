// Two limits of billing through the real server (issue 20): nothing is billed
// to an account awaiting deletion (item 8: 409 ACCOUNT_SCHEDULED_FOR_DELETION
// on the administrators' billing actions, and its past-due renewal voided),
// and a plan's free trial is offered once per user and plan type (item 10).
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, createAdmin, createSuperadmin, query, RELAXED_LIMITS, type TestAccount } from '../../../test/support/auth.ts';
import { attachCard, createTestPlan, relogin, subscribeWithCard, subscriberWithCard } from '../../../test/support/billing.ts';
import { DAY, ManualClock, MINUTE } from '../core/clock.ts';

const clock = new ManualClock(Date.parse('2026-08-03T10:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const superadmin = await createSuperadmin(cp);
const admin = await createAdmin(cp);
const send = (who: TestAccount, method: string, path: string, json?: unknown) => cp.request(method, path, { headers: bearer(who.accessToken), json });

const plan = await createTestPlan(cp, superadmin, { name: 'Monthly', price: 7 });
const trialPlan = await createTestPlan(cp, superadmin, { name: 'Trial', price: 9, trial_days: 14 });
const otherTrialPlan = await createTestPlan(cp, superadmin, { name: 'Trial too', price: 11, trial_days: 30 });
const liveTrialPlan = await createTestPlan(cp, superadmin, { name: 'Live trial', type: 'live', price: 5, trial_days: 7 });
await cp.app.jobs.runDue();

const sub = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_subscription where id = ?', [id]))[0]!;
const invoices = (userId: string) => countRows(cp, 'billing_invoice', 'user_id = ?', [userId]);
const charges = (userId: string) => countRows(cp, 'billing_invoice_charge', 'invoice_id in (select id from billing_invoice where user_id = ?)', [userId]);
const requestDeletion = (who: TestAccount) => send(who, 'POST', '/v1/users/me/deletion-request', { password: who.password, reason: 'leaving' });

t.test('regression: an administrator can reactivate a subscription on an account awaiting deletion', async (t) => {
  const me = await subscriberWithCard(cp);
  const { id } = await subscribeWithCard(cp, me, plan.id);
  t.equal((await requestDeletion(me)).status, 202);
  t.equal((await sub(id)).status, 'canceled', 'ended by the deletion request');
  const before = { invoices: await invoices(me.id), charges: await charges(me.id) };
  const base = `/v1/admin/users/${me.id}/subscriptions`;

  const reactivate = await send(admin, 'POST', `${base}/${id}/reactivate`, { admin_note: 'came back?' });
  t.equal(reactivate.status, 409, reactivate.text);
  t.equal(reactivate.body.code, 'ACCOUNT_SCHEDULED_FOR_DELETION');
  const assign = await send(admin, 'POST', base, { plan_id: plan.id, payment_method_id: me.pm });
  t.equal(assign.status, 409);
  t.equal(assign.body.code, 'ACCOUNT_SCHEDULED_FOR_DELETION');
  const complimentary = await send(admin, 'POST', base, { plan_id: plan.id });
  t.equal(complimentary.body.code, 'ACCOUNT_SCHEDULED_FOR_DELETION', 'nor a complimentary one: it would outlive the erasure');
  t.match(await sub(id), { status: 'canceled', next_billing_date: null });
  t.same({ invoices: await invoices(me.id), charges: await charges(me.id) }, before, 'nothing invoiced or charged');
  t.equal(await countRows(cp, 'billing_subscription', 'user_id = ?', [me.id]), 1);

  // A paused subscription (set aside by hand: the request ends them all) is not resumed either.
  await query(cp, `update billing_subscription set status = 'paused', paused_at = ? where id = ?`, [clock.now(), id]);
  const resume = await send(admin, 'POST', `${base}/${id}/resume`);
  t.equal(resume.body.code, 'ACCOUNT_SCHEDULED_FOR_DELETION');
  t.equal((await sub(id)).status, 'paused');
  await query(cp, `update billing_subscription set status = 'canceled', paused_at = null where id = ?`, [id]);

  // Once the owner cancels the deletion, billing works again.
  t.equal((await send(me, 'DELETE', '/v1/users/me/deletion-request')).status, 204);
  clock.advance(MINUTE); // a new period, not the one the first invoice opened at the same instant
  const again = await send(admin, 'POST', `${base}/${id}/reactivate`, {});
  t.equal(again.status, 200, again.text);
  t.equal(again.body.data.status, 'active');
});

t.test('regression: an account deletion leaves its past-due renewal to be charged', async (t) => {
  const me = await subscriberWithCard(cp, 'tok_chargeDeclined');
  const { id } = await subscribeWithCard(cp, me, trialPlan.id);
  clock.set(new Date(new Date((await sub(id)).trial_end).getTime() + MINUTE));
  await cp.app.jobs.runDue();
  await relogin(cp, me, admin, superadmin);
  t.equal((await sub(id)).status, 'past_due');
  t.equal((await requestDeletion(me)).status, 202);
  t.same(await query(cp, 'select status from billing_invoice where subscription_id = ?', [id]), [{ status: 'void' }], 'the open renewal is voided');
  const attempts = await charges(me.id);
  clock.advance(2 * DAY);
  await cp.app.jobs.runDue();
  await relogin(cp, me, admin, superadmin);
  t.equal(await charges(me.id), attempts, 'no retry is charged');
});

t.test('regression: subscribe → cancel → subscribe restarts a plan\'s trial each time', async (t) => {
  const me = await subscriberWithCard(cp, 'tok_chargeDeclined');
  const first = await subscribeWithCard(cp, me, trialPlan.id);
  t.equal(first.status, 'trialing');
  t.equal((await send(me, 'POST', `/v1/subscriptions/${first.id}/cancel`, { immediate: true })).status, 200);
  const before = { subscriptions: await countRows(cp, 'billing_subscription', 'user_id = ?', [me.id]), invoices: await invoices(me.id) };

  // No second trial of the type, on this plan or another: charged at once, and the declining card is a 402 with nothing created.
  for (const planId of [trialPlan.id, otherTrialPlan.id]) {
    const again = await send(me, 'POST', '/v1/subscriptions', { plan_id: planId, payment_method_id: me.pm });
    t.equal(again.status, 402, again.text);
  }
  t.same({ subscriptions: await countRows(cp, 'billing_subscription', 'user_id = ?', [me.id]), invoices: await invoices(me.id) }, before);

  // With a card that pays: active at once, the first period invoiced, no trial.
  const visa = await attachCard(cp, me, 'tok_visa');
  const paid = await send(me, 'POST', '/v1/subscriptions', { plan_id: trialPlan.id, payment_method_id: visa });
  t.equal(paid.status, 201, paid.text);
  t.match(paid.body.data, { status: 'active', trial_start: null, trial_end: null });
  t.match((await query(cp, `select status, amount_paid_minor from billing_invoice where subscription_id = ?`, [paid.body.data.id]))[0], { status: 'paid', amount_paid_minor: '900' });

  // Another type has a trial of its own.
  const live = await send(me, 'POST', '/v1/subscriptions', { plan_id: liveTrialPlan.id, payment_method_id: visa });
  t.equal(live.body.data.status, 'trialing', 'one trial per plan type');
});

t.test('an administrator\'s trial_end grants a trial to a user who had one (the trial limit is the subscriber\'s)', async (t) => {
  const me = await subscriberWithCard(cp);
  const first = await subscribeWithCard(cp, me, liveTrialPlan.id);
  t.equal((await send(me, 'POST', `/v1/subscriptions/${first.id}/cancel`, { immediate: true })).status, 200);
  const granted = await send(admin, 'POST', `/v1/admin/users/${me.id}/subscriptions`, {
    plan_id: liveTrialPlan.id, payment_method_id: me.pm, trial_end: new Date(clock.now().getTime() + 10 * DAY).toISOString(),
  });
  t.equal(granted.status, 201, granted.text);
  t.equal(granted.body.data.status, 'trialing');
});
