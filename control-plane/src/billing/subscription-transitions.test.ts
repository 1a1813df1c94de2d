// Subscription state changes (issue 20, item 6): every named transition
// driven from every state, through the entry points that call it — the
// subscriber's and the administrators' services, and the billing clock's
// transitions — asserting the state reached (document 1 §3, DESIGN.md §5), the
// audit entry naming the acting party, the notice of a change the subscriber
// did not make, and that a refused transition (409 CONFLICT when asked for,
// skipped by the clock) changes nothing. Then the billing clock end to end:
// its period-end cancellations, expiries and dunning moves are audited and
// notified like the API's.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { countRows, createUserDirect, query, RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { DAY, ManualClock, MINUTE, SECOND } from '../core/clock.ts';
import { systemContext, type RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { Subscription, SUBSCRIPTION_STATUSES, type SubscriptionStatus } from './billing.entities.ts';
import { attachPaymentMethod } from './payment-method-service.ts';
import { createPlan } from './plan-service.ts';
import {
  cancelSubscription, changePlan, createSubscription, extendSubscription, patchSubscription, pauseSubscription, reactivateSubscription, resumeSubscription,
} from './subscription-service.ts';
import { cancelForNonpayment, endAtPeriodEnd, expire, markPastDue, resumeDue, TRANSITIONS, type Party } from './subscription-transitions.ts';

const clock = new ManualClock(Date.parse('2026-09-01T08:00:00Z'));
const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
const app = cp.app;

const adminUser = await createUserDirect(cp, { roles: ['superadmin', 'admin'] });
const adminContext = () => systemContext(app, { actor: { type: 'user', id: adminUser.id, roles: ['superadmin', 'admin'] } });
const userContext = (userId: string): RequestContext => Object.assign(systemContext(app, { actor: { type: 'user', id: userId, roles: ['subscriber'] } }), { access: 'user' as const });
const planBody = { type: 'svod', currency: 'EUR', billing_cycle: 'monthly', max_profiles: 2, max_concurrent_streams: 2, max_devices: 5, max_quality: 'HD', has_downloads: false, has_ads: false, is_active: true, trial_days: 0, has_hdr: false, has_dolby_atmos: false } as const;
const basic = await createPlan(adminContext(), { ...planBody, name: 'Basic', price: 5 } as never);
const premium = await createPlan(adminContext(), { ...planBody, name: 'Premium', price: 12 } as never);

type Status = SubscriptionStatus;
const same = (states: Status[]) => Object.fromEntries(states.map((s) => [s, s])) as Partial<Record<Status, Status>>;
const LIVE: Status[] = ['trialing', 'active', 'past_due', 'paused'];

/**
 * What each transition does from each state (document 1 §3, DESIGN.md §5, decisions "The billing engine"), written out
 * here rather than read from TRANSITIONS, so the test fails when the table drifts; a state not listed is refused.
 */
type Run = (id: string, userId: string) => Promise<unknown>;
/** Runs `work` in a context made for the subscription's owner, with the subscription loaded in that context's unit of work (as a route does). */
const as = (context: (userId: string) => RequestContext, work: (rc: RequestContext, s: Subscription) => Promise<unknown>): Run => async (id, userId) => {
  const rc = context(userId);
  return work(rc, await rc.em.findOneOrFail(Subscription, id, { populate: ['plan'] }));
};
const user = userContext;
const admin = () => adminContext();
const system = () => systemContext(app);
const notice = (title: string) => ({ type: 'payment_failed' as const, title, body: 'table' });

const EXPECTED: Record<string, { party: Party; to: Partial<Record<Status, Status>>; run: Run }> = {
  cancel: { party: 'user', to: { trialing: 'canceled', active: 'canceled', past_due: 'canceled', paused: 'canceled' }, run: as(user, (rc, s) => cancelSubscription(app, rc, s, { immediate: true })) },
  schedule_cancel: { party: 'user', to: same(LIVE), run: as(user, (rc, s) => cancelSubscription(app, rc, s, { immediate: false })) },
  unschedule_cancel: { party: 'admin', to: same(LIVE), run: as(admin, (rc, s) => patchSubscription(app, rc, s.user.id, s.id, { cancel_at_period_end: false })) },
  change_plan: { party: 'user', to: same(['trialing', 'active']), run: as(user, (rc, s) => changePlan(app, rc, s.id, { plan_id: premium.id })) },
  pause: { party: 'admin', to: { trialing: 'paused', active: 'paused' }, run: as(admin, (rc, s) => pauseSubscription(app, rc, s, { resume_at: null, reason: 'table' })) },
  resume: { party: 'admin', to: { paused: 'active' }, run: as(admin, (rc, s) => resumeSubscription(app, rc, s)) },
  extend: { party: 'admin', to: same(LIVE), run: as(admin, (rc, s) => extendSubscription(app, rc, s, { days: 3 })) },
  reactivate: { party: 'admin', to: { canceled: 'active', expired: 'active' }, run: as(admin, (rc, s) => reactivateSubscription(app, rc, s.user.id, s.id, {})) },
  end_at_period_end: { party: 'system', to: { trialing: 'canceled', active: 'canceled', past_due: 'canceled' }, run: as(system, (rc, s) => endAtPeriodEnd(app, rc, [s])) },
  expire: { party: 'system', to: { trialing: 'expired', active: 'expired' }, run: as(system, (rc, s) => expire(app, rc, [s])) },
  mark_past_due: {
    party: 'system', to: { trialing: 'past_due', active: 'past_due' },
    run: as(system, (rc, s) => markPastDue(app, rc, [{ subscription: s, input: { invoiceId: crypto.randomUUID(), notice: notice('Your payment failed') } }])),
  },
  cancel_for_nonpayment: {
    party: 'system', to: { past_due: 'canceled' },
    run: as(system, (rc, s) => cancelForNonpayment(app, rc, [{ subscription: s, input: { invoiceId: crypto.randomUUID(), notice: notice('Your subscription was canceled') } }])),
  },
  resume_due: { party: 'system', to: { paused: 'active' }, run: as(system, (rc, s) => resumeDue(app, rc, [s])) },
};

/** A user with a card and a subscription moved to `status` (as the engine leaves one in that state). */
async function subscriptionIn(status: Status): Promise<{ id: string; userId: string }> {
  const user = await createUserDirect(cp);
  const method = await attachPaymentMethod(app, userContext(user.id), { payment_method_token: 'tok_visa', set_as_default: true });
  const { id } = await createSubscription(app, userContext(user.id), { userId: user.id, plan_id: basic.id, payment_method_id: method.id });
  const now = clock.now();
  const fields: Record<Status, string> = {
    trialing: `trial_start = current_period_start, trial_end = current_period_end`,
    active: `auto_renew = true`,
    past_due: `next_billing_date = null`,
    canceled: `canceled_at = ?, ended_at = ?, next_billing_date = null`,
    paused: `paused_at = ?, next_billing_date = null`,
    expired: `ended_at = ?, auto_renew = false, next_billing_date = null`,
  };
  const params = { trialing: [], active: [], past_due: [], canceled: [now, now], paused: [now], expired: [now] }[status];
  await query(cp, `update billing_subscription set status = ?, ${fields[status]} where id = ?`, [status, ...params, id]);
  clock.advance(SECOND); // later work gets its own instant (a reactivation's period is not the first one's)
  return { id, userId: user.id };
}

const row = async (id: string) => (await query<Record<string, unknown>>(cp, `select status, plan_id, cancel_at_period_end, canceled_at, current_period_end, version from billing_subscription where id = ?`, [id]))[0];

for (const [name, expected] of Object.entries(EXPECTED)) {
  t.test(`transition ${name} from every state`, async (t) => {
    const transition = name === 'resume_due' ? 'resume' : name;
    const action = TRANSITIONS[transition as keyof typeof TRANSITIONS].action;
    for (const from of SUBSCRIPTION_STATUSES) {
      const subscription = await subscriptionIn(from);
      if (name === 'unschedule_cancel') await query(cp, 'update billing_subscription set cancel_at_period_end = true, canceled_at = ? where id = ?', [clock.now(), subscription.id]);
      const before = await row(subscription.id);
      const audits = () => countRows(cp, 'audit_log', `resource_id = ? and action = ? and metadata->>'transition' = ?`, [subscription.id, action, transition]);
      const notices = () => countRows(cp, 'notification', 'user_id = ?', [subscription.userId]);
      const noticesBefore = await notices();
      const to = expected.to[from];
      let refusal: unknown = null;
      try {
        await expected.run(subscription.id, subscription.userId);
      } catch (error) {
        refusal = error;
      }
      if (to) {
        t.equal(refusal, null, `${name} from ${from} is allowed`);
        t.equal((await row(subscription.id))!.status, to, `${name}: ${from} → ${to}`);
        const [entry] = await query<{ actor_type: string; actor_id: string | null; metadata: any }>(cp,
          `select actor_type, actor_id, metadata from audit_log where resource_id = ? and metadata->>'transition' = ? order by created_at desc limit 1`, [subscription.id, transition]);
        t.equal(await audits(), 1, `${name} from ${from}: one ${action} entry`);
        t.equal(entry?.metadata.by, expected.party, `by the ${expected.party}`);
        t.equal(entry?.actor_type, expected.party === 'system' ? 'system' : 'user');
        t.equal(entry?.actor_id, expected.party === 'admin' ? adminUser.id : expected.party === 'user' ? subscription.userId : null);
        t.equal(await notices() - noticesBefore, expected.party === 'user' ? 0 : 1, expected.party === 'user' ? 'no notice of their own change' : 'the subscriber is told');
      } else {
        if (expected.party === 'system') t.equal(refusal, null, `${name} from ${from}: the clock skips it`);
        else t.ok(refusal instanceof ApiError && refusal.code === 'CONFLICT', `${name} from ${from} is refused with 409 (${(refusal as Error)?.message})`);
        t.same(await row(subscription.id), before, `${name} from ${from}: nothing changed`);
        t.equal(await audits(), 0, 'nothing audit-logged');
        t.equal(await notices(), noticesBefore, 'no notice');
      }
    }
  });
}

t.test('the billing clock\'s moves are transitions: period-end cancellation and expiry are audit-logged as the system and notified; canceled_at keeps the request time', async (t) => {
  const sub = async (id: string) => (await query<Record<string, any>>(cp, 'select * from billing_subscription where id = ?', [id]))[0]!;
  const scheduled = await subscriptionIn('active');
  const asked = clock.now();
  await EXPECTED.schedule_cancel!.run(scheduled.id, scheduled.userId);
  const lapsing = await subscriptionIn('active');
  await patchSubscription(app, adminContext(), lapsing.userId, lapsing.id, { auto_renew: false });
  const declining = await subscriptionIn('active');
  const declined = await attachPaymentMethod(app, userContext(declining.userId), { payment_method_token: 'tok_chargeDeclined', set_as_default: true });
  t.equal((await sub(declining.id)).payment_method_id, declined.id, 'follows the new default');
  await cp.app.jobs.runDue();
  clock.set(new Date(new Date((await sub(scheduled.id)).current_period_end).getTime() + MINUTE));
  await cp.app.jobs.runDue();

  t.match(await sub(scheduled.id), { status: 'canceled' });
  t.equal(new Date((await sub(scheduled.id)).canceled_at).toISOString(), asked.toISOString(), 'canceled_at: when it was asked for');
  t.equal(new Date((await sub(scheduled.id)).ended_at).toISOString(), new Date((await sub(scheduled.id)).current_period_end).toISOString(), 'ended_at: the period end');
  t.match(await sub(lapsing.id), { status: 'expired', canceled_at: null });
  t.match(await sub(declining.id), { status: 'past_due' });
  for (const [id, action, type] of [[scheduled.id, 'subscription.ended', 'subscription_canceled'], [lapsing.id, 'subscription.expired', 'subscription_expired'], [declining.id, 'subscription.past_due', 'payment_failed']] as const) {
    const [entry] = await query<{ actor_type: string; metadata: any }>(cp, 'select actor_type, metadata from audit_log where resource_id = ? and action = ?', [id, action]);
    t.match(entry, { actor_type: 'system', metadata: { by: 'system' } }, `${action} by the system`);
    const owner = (await sub(id)).user_id;
    t.equal(await countRows(cp, 'notification', 'user_id = ? and type = ?', [owner, type]), 1, `${type} notice`);
  }

  // Recovery through a new card: recorded as the system's recover transition, with a notice.
  const visa = await attachPaymentMethod(app, userContext(declining.userId), { payment_method_token: 'tok_visa', set_as_default: true });
  t.match(await sub(declining.id), { status: 'active', payment_method_id: visa.id });
  t.match((await query<{ actor_type: string }>(cp, `select actor_type from audit_log where resource_id = ? and action = 'subscription.recovered'`, [declining.id]))[0], { actor_type: 'system' });
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_succeeded'`, [declining.userId]), 1);

  // The clock's retries exhaust for another: canceled for nonpayment, audited, the final notice.
  const hopeless = await subscriptionIn('active');
  await attachPaymentMethod(app, userContext(hopeless.userId), { payment_method_token: 'tok_insufficientFunds', set_as_default: true });
  clock.set(new Date(new Date((await sub(hopeless.id)).current_period_end).getTime() + MINUTE));
  await cp.app.jobs.runDue();
  for (const days of [1, 3, 5]) {
    clock.advance(days * DAY);
    await cp.app.jobs.runDue();
  }
  t.match(await sub(hopeless.id), { status: 'canceled' });
  t.ok((await sub(hopeless.id)).ended_at);
  t.match((await query(cp, `select actor_type, metadata->>'transition' as transition from audit_log where resource_id = ? and action = 'subscription.canceled'`, [hopeless.id]))[0],
    { actor_type: 'system', transition: 'cancel_for_nonpayment' });
  t.equal(await countRows(cp, 'audit_log', `resource_id = ? and action = 'subscription.past_due'`, [hopeless.id]), 1, 'past_due once, not at each retry');
  t.equal(await countRows(cp, 'notification', `user_id = ? and type = 'payment_failed'`, [hopeless.userId]), 4, 'a notice per declined attempt');
});

t.test('the account deletion cancels through the cancel transition, as the user, with no renewal and no notice', async (t) => {
  const s = await subscriptionIn('active');
  const rc = userContext(s.userId);
  const before = await countRows(cp, 'notification', 'user_id = ?', [s.userId]);
  t.equal(await app.endSubscriptionsForDeletion(rc, s.userId), 1);
  t.match((await query(cp, 'select status, auto_renew, next_billing_date from billing_subscription where id = ?', [s.id]))[0], { status: 'canceled', auto_renew: false, next_billing_date: null });
  t.match((await query(cp, `select actor_id, metadata->>'by' as by, metadata->>'reason' as reason from audit_log where resource_id = ? and action = 'subscription.canceled'`, [s.id]))[0],
    { actor_id: s.userId, by: 'user', reason: 'account deletion requested' });
  t.equal(await countRows(cp, 'notification', 'user_id = ?', [s.userId]), before, 'the deletion notice tells them (accounts), not one per subscription');
});
