// Subscription state changes (issue 20, item 6; document 1 §3; DESIGN.md §5),
// one named transition each, as Lago's subscription services are: the states a
// subscription may leave from, the change, and its side effects — invoices
// voided, the audit entry naming the acting party (the subscriber, an
// administrator, or the system: the billing clock, an account deletion), and
// a notice to the subscriber of every change they did not make themselves
// (through notify(), so their preferences hold). The subscriber's and the
// administrators' operations and the billing clock all call these; nothing
// else writes a subscription's status.
//
// A transition refused from the subscription's state is a 409 CONFLICT when
// someone asked for it (`strict`), and skipped when the billing clock finds
// the row moved on meanwhile. The clock's set-based renewal writes the period
// in SQL for speed and records its state changes here (recordRenewals).
//
// `canceled_at` means what Stripe's does: when the cancellation was asked for
// (now for an immediate one, the request's time for one at the period end,
// kept when it takes effect); `ended_at` is when the subscription stopped
// (canceled or expired).
import { changesOf, recordAudit } from '../audit/audit.ts';
import { SECOND } from '../core/clock.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError } from '../http/errors.ts';
import { type NotificationType, type NotifyInput, notifyMany } from '../notifications/index.ts';
import { LIVE_SUBSCRIPTION_STATUSES, type Subscription, type SubscriptionStatus } from './billing.entities.ts';
import { voidOpenInvoices } from './invoice-service.ts';
import type { BillingServices } from './services.ts';

/** Who made a change: the subscriber, an administrator acting on their account, or the platform (billing clock, account deletion). */
export type Party = 'user' | 'admin' | 'system';

const LIVE = LIVE_SUBSCRIPTION_STATUSES;

/**
 * Every transition: the states it leaves from ('none': no subscription of the
 * type yet), what it is called in the audit trail, and what a refusal says.
 */
export const TRANSITIONS = {
  create: { from: ['none'], action: 'subscription.created', verb: 'be created' },
  change_plan: { from: ['trialing', 'active'], action: 'subscription.plan_changed', verb: 'change plan' },
  schedule_cancel: { from: LIVE, action: 'subscription.cancel_scheduled', verb: 'be canceled' },
  unschedule_cancel: { from: LIVE, action: 'subscription.cancel_unscheduled', verb: 'keep renewing' },
  cancel: { from: LIVE, action: 'subscription.canceled', verb: 'be canceled' },
  end_at_period_end: { from: ['trialing', 'active', 'past_due'], action: 'subscription.ended', verb: 'end at its period end' },
  expire: { from: ['trialing', 'active'], action: 'subscription.expired', verb: 'expire' },
  mark_past_due: { from: ['trialing', 'active'], action: 'subscription.past_due', verb: 'become past due' },
  convert_trial: { from: ['trialing'], action: 'subscription.trial_converted', verb: 'convert from its trial' },
  recover: { from: ['past_due'], action: 'subscription.recovered', verb: 'recover' },
  cancel_for_nonpayment: { from: ['past_due'], action: 'subscription.canceled', verb: 'be canceled for nonpayment' },
  pause: { from: ['trialing', 'active'], action: 'subscription.paused', verb: 'be paused' },
  resume: { from: ['paused'], action: 'subscription.resumed', verb: 'be resumed' },
  reactivate: { from: ['canceled', 'expired'], action: 'subscription.reactivated', verb: 'be reactivated' },
  extend: { from: LIVE, action: 'subscription.extended', verb: 'be extended' },
} as const satisfies Record<string, { from: readonly (SubscriptionStatus | 'none')[]; action: string; verb: string }>;
export type TransitionName = keyof typeof TRANSITIONS;

/** Whether `name` may leave from `status`. */
/**
 * The states a paid renewal leaves from, read off the table: an active
 * subscription renews (no state change), a trial converts (convert_trial), a
 * past-due one recovers (recover), each `active` after. Any other state — one
 * canceled, expired or paused while the renewal's charge was in flight — keeps
 * its state: the clock's renewal statement admits only these.
 */
export const RENEWABLE_FROM: readonly SubscriptionStatus[] = ['active', ...TRANSITIONS.convert_trial.from, ...TRANSITIONS.recover.from];

export function allows(name: TransitionName, status: SubscriptionStatus | 'none'): boolean {
  return (TRANSITIONS[name].from as readonly string[]).includes(status);
}

/** 409 CONFLICT unless `name` may leave from the subscription's state. */
export function assertAllowed(name: TransitionName, subscription: Subscription): void {
  if (!allows(name, subscription.status)) {
    throw new ApiError('CONFLICT', `A ${subscription.status.replace('_', ' ')} subscription cannot ${TRANSITIONS[name].verb}`, { details: { transition: name, status: subscription.status } });
  }
}

/** The acting party of a change to `subscription` made in `rc`. */
export function partyOf(rc: RequestContext, subscription: Subscription): Party {
  if (!rc.actor || rc.actor.type === 'system') return 'system';
  return rc.actor.id === subscription.user.id ? 'user' : 'admin';
}

/** When the clock next charges the subscription: the period end of a trialing or active one that renews; otherwise none. */
export function syncNextBilling(subscription: Subscription): void {
  const renews = (subscription.status === 'active' || subscription.status === 'trialing') && subscription.auto_renew && !subscription.cancel_at_period_end;
  subscription.next_billing_date = renews ? subscription.current_period_end : null;
}

const SNAPSHOT = [
  'status', 'plan_id', 'price_minor', 'cancel_at_period_end', 'canceled_at', 'ended_at', 'current_period_start', 'current_period_end', 'trial_end', 'paused_at', 'resume_at',
] as const;
type Snapshot = Record<(typeof SNAPSHOT)[number], unknown>;
const snapshot = (s: Subscription): Snapshot => Object.fromEntries(SNAPSHOT.map((f) => [f, f === 'plan_id' ? s.plan?.id : s[f]])) as Snapshot;

/** What the subscriber is told of a change they did not make (null: nothing). */
export interface Notice {
  type?: NotificationType;
  priority?: NotifyInput['priority'];
  title: string;
  body: string;
}

interface Step<I> {
  subscription: Subscription;
  input: I;
}

interface Options<I> {
  /** Refused from the subscription's state: throw 409 (someone asked), or skip (the clock found it moved on). */
  strict: boolean;
  apply(subscription: Subscription, input: I, now: Date): void | Promise<void>;
  reason?(input: I): string | undefined;
  metadata?(subscription: Subscription, input: I): Record<string, unknown>;
  /** The notice of a change the subscriber did not make; always sent when `always` (the system's dunning notices). */
  notice?(subscription: Subscription, input: I, party: Party): Notice | null;
  action?: string;
}

/**
 * Runs transition `name` on each subscription: checks the state it leaves
 * from, applies the change, recomputes the next billing date, records the
 * audit entry with the acting party and notifies the subscriber of changes
 * they did not make. In the caller's unit of work (flushed). Returns the
 * subscriptions that moved.
 */
async function run<I>(app: BillingServices, rc: RequestContext, name: TransitionName, steps: readonly Step<I>[], options: Options<I>): Promise<Subscription[]> {
  const now = app.clock.now();
  const moved: Subscription[] = [];
  const notices: NotifyInput[] = [];
  for (const { subscription, input } of steps) {
    if (!allows(name, subscription.status)) {
      if (options.strict) assertAllowed(name, subscription);
      continue;
    }
    const party = partyOf(rc, subscription);
    const before = snapshot(subscription);
    await options.apply(subscription, input, now);
    syncNextBilling(subscription);
    recordAudit(rc, {
      action: options.action ?? TRANSITIONS[name].action, resource_type: 'subscription', resource_id: subscription.id, reason: options.reason?.(input),
      changes: changesOf(before, snapshot(subscription)),
      metadata: { user_id: subscription.user.id, by: party, transition: name, ...options.metadata?.(subscription, input) },
    });
    const notice = party === 'user' ? null : options.notice?.(subscription, input, party) ?? null;
    if (notice) notices.push({ userId: subscription.user.id, type: notice.type ?? 'subscription_changed', priority: notice.priority, title: notice.title, body: notice.body });
    moved.push(subscription);
  }
  await rc.em.flush();
  if (notices.length) await notifyMany(app, rc, notices);
  return moved;
}

const day = (date: Date) => date.toISOString().slice(0, 10);
const byAdmin = (party: Party) => (party === 'admin' ? 'An administrator' : 'We');

// ---- asked for (subscriber, administrator, account deletion): strict --------------------------------

/** Cancel now: `canceled`, no refund, open invoices voided (their balance returned). */
export async function cancelNow(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { reason?: string; endRenewal?: boolean } = {}): Promise<void> {
  await run(app, rc, 'cancel', [{ subscription, input }], {
    strict: true,
    reason: (i) => i.reason,
    metadata: () => ({ immediate: true, refund: false }),
    async apply(s, i, now) {
      s.status = 'canceled';
      s.canceled_at = now;
      s.ended_at = now;
      s.cancel_at_period_end = false;
      if (i.endRenewal) s.auto_renew = false;
      await voidOpenInvoices(rc, [s.id], now);
    },
    notice: (s, i, party) => ({ type: 'subscription_canceled', title: 'Your subscription was canceled', body: `${byAdmin(party)} canceled your ${s.plan.name} subscription; it has ended.${i.reason ? ` Reason: ${i.reason}` : ''}` }),
  });
}

/** Cancel at the period end: access continues; `canceled` when the period ends (canceled_at is this request's time). */
export async function scheduleCancel(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { reason?: string } = {}): Promise<void> {
  await run(app, rc, 'schedule_cancel', [{ subscription, input }], {
    strict: true,
    reason: (i) => i.reason,
    metadata: () => ({ immediate: false, refund: false }),
    apply(s, _i, now) {
      s.cancel_at_period_end = true;
      s.canceled_at = now;
    },
    notice: (s, _i, party) => ({ type: 'subscription_canceled', title: 'Your subscription will end', body: `${byAdmin(party)} canceled your ${s.plan.name} subscription; it stays available until ${day(s.current_period_end)} and will not renew.` }),
  });
}

/** Undoes a cancellation at the period end (an administrator's patch): it renews again. */
export async function unscheduleCancel(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { reason?: string } = {}): Promise<void> {
  await run(app, rc, 'unschedule_cancel', [{ subscription, input }], {
    strict: true,
    reason: (i) => i.reason,
    apply(s) {
      s.cancel_at_period_end = false;
      s.canceled_at = null;
    },
    notice: (s, _i, party) => ({ title: 'Your subscription will renew', body: `${byAdmin(party)} withdrew the cancellation of your ${s.plan.name} subscription; it renews on ${day(s.current_period_end)}.` }),
  });
}

/** Pause (administrator): billing and access suspended; resumed automatically at resume_at when given. */
export async function pause(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { resume_at: Date | null; reason?: string }): Promise<void> {
  await run(app, rc, 'pause', [{ subscription, input }], {
    strict: true,
    reason: (i) => i.reason,
    metadata: (_s, i) => ({ resume_at: i.resume_at?.toISOString() ?? null }),
    apply(s, i, now) {
      s.status = 'paused';
      s.paused_at = now;
      s.resume_at = i.resume_at;
    },
    notice: (s, i, party) => ({ title: 'Your subscription is paused', body: `${byAdmin(party)} paused your ${s.plan.name} subscription${i.resume_at ? ` until ${day(i.resume_at)}` : ''}; nothing is billed meanwhile.` }),
  });
}

/**
 * Resumes a paused subscription (administrator, or the clock at resume_at):
 * the period end (and a trial's end) move later by the paused time, and so
 * does the start of the prepaid stretch (it was not used); `trialing` again
 * when the trial had not ended, `active` otherwise.
 */
function resumeInPlace(s: Subscription, now: Date): void {
  const paused = Math.max(0, now.getTime() - (s.paused_at ?? now).getTime());
  const inTrial = s.trial_end !== null && s.trial_end !== undefined && s.trial_end.getTime() === s.current_period_end.getTime();
  s.current_period_end = new Date(s.current_period_end.getTime() + paused);
  if (s.prepaid_from) s.prepaid_from = new Date(s.prepaid_from.getTime() + paused);
  if (inTrial) s.trial_end = s.current_period_end;
  s.status = inTrial ? 'trialing' : 'active';
  s.paused_at = null;
  s.resume_at = null;
}

const resumeOptions = (strict: boolean): Options<{ reason?: string }> => ({
  strict,
  reason: (i) => i.reason,
  apply: (s, _i, now) => resumeInPlace(s, now),
  notice: (s, _i, party) => ({ title: 'Your subscription is running again', body: `${byAdmin(party)} resumed your ${s.plan.name} subscription; its period now ends on ${day(s.current_period_end)}.` }),
});

export async function resume(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { reason?: string } = {}): Promise<void> {
  await run(app, rc, 'resume', [{ subscription, input }], resumeOptions(true));
}

/** Extend (administrator): the period end (and a running trial's end) move later by `days`; no charge; status unchanged. */
export async function extend(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { days: number; reason?: string }): Promise<void> {
  await run(app, rc, 'extend', [{ subscription, input }], {
    strict: true,
    reason: (i) => i.reason,
    metadata: (_s, i) => ({ days: i.days }),
    apply(s, i) {
      const inTrial = s.trial_end && s.trial_end.getTime() === s.current_period_end.getTime();
      s.current_period_end = new Date(s.current_period_end.getTime() + i.days * 86_400 * SECOND);
      if (inTrial) s.trial_end = s.current_period_end;
    },
    notice: (s, i) => ({ title: 'Your subscription was extended', body: `Your ${s.plan.name} subscription was extended by ${i.days} day${i.days === 1 ? '' : 's'}, free; it now runs until ${day(s.current_period_end)}.` }),
  });
}

/**
 * A transition whose change the caller makes itself (create, change plan,
 * reactivate: they invoice and charge inside `apply`), checked and recorded
 * like the others.
 */
export async function transition<I>(app: BillingServices, rc: RequestContext, name: 'create' | 'change_plan' | 'reactivate', subscription: Subscription, input: I, options: {
  apply(subscription: Subscription, input: I, now: Date): void | Promise<void>;
  reason?: string;
  metadata?: Record<string, unknown>;
  notice?: Notice;
  action?: string;
}): Promise<void> {
  await run(app, rc, name, [{ subscription, input }], {
    strict: true,
    apply: options.apply,
    reason: () => options.reason,
    metadata: () => options.metadata ?? {},
    notice: () => options.notice ?? null,
    action: options.action,
  });
}

/**
 * The `create` transition's record (none → trialing or active): a subscriber's
 * own subscription (`subscription.created`) or an administrator's assignment
 * (`subscription.assigned`, with a notice to the subscriber). The caller
 * checked that no live subscription of the type exists (409
 * SUBSCRIPTION_EXISTS) and made it.
 */
export async function recordCreated(app: BillingServices, rc: RequestContext, subscription: Subscription, options: { reason?: string; metadata?: Record<string, unknown> }): Promise<void> {
  const party = partyOf(rc, subscription);
  recordAudit(rc, {
    action: party === 'admin' ? 'subscription.assigned' : TRANSITIONS.create.action, resource_type: 'subscription', resource_id: subscription.id,
    reason: options.reason, changes: { status: { from: null, to: subscription.status } },
    metadata: { user_id: subscription.user.id, by: party, transition: 'create', status: subscription.status, ...options.metadata },
  });
  await rc.em.flush();
  if (party === 'user') return;
  const plan = subscription.plan.name;
  await notifyMany(app, rc, [{
    userId: subscription.user.id, type: 'subscription_changed', title: 'A subscription was added to your account',
    body: subscription.payment_method_id
      ? `An administrator subscribed you to ${plan}${subscription.status === 'trialing' ? `, with a trial until ${day(subscription.current_period_end)}` : ''}.`
      : `An administrator gave you ${plan}, free of charge, until ${day(subscription.current_period_end)}${subscription.auto_renew ? ' and renewing' : ''}.`,
  }]);
}

// ---- the billing clock's: skipped when the row moved on -----------------------------------------------

/** Period-end cancellations take effect: `canceled` (canceled_at stays the request's time), open invoices voided. */
export async function endAtPeriodEnd(app: BillingServices, rc: RequestContext, subscriptions: readonly Subscription[]): Promise<Subscription[]> {
  return run(app, rc, 'end_at_period_end', subscriptions.map((subscription) => ({ subscription, input: {} })), {
    strict: false,
    reason: () => 'cancellation at the period end took effect',
    async apply(s, _i, now) {
      s.status = 'canceled';
      s.ended_at = s.current_period_end;
      s.canceled_at ??= now;
      await voidOpenInvoices(rc, [s.id], now);
    },
    notice: (s) => ({ type: 'subscription_canceled', title: 'Your subscription has ended', body: `Your ${s.plan.name} subscription ended on ${day(s.current_period_end)}, as its cancellation asked. You can subscribe again at any time.` }),
  });
}

/** Non-renewing subscriptions (auto_renew false) reach their period end: `expired`. */
export async function expire(app: BillingServices, rc: RequestContext, subscriptions: readonly Subscription[]): Promise<Subscription[]> {
  return run(app, rc, 'expire', subscriptions.map((subscription) => ({ subscription, input: {} })), {
    strict: false,
    reason: () => 'period ended without renewal',
    apply(s) {
      s.status = 'expired';
      s.ended_at = s.current_period_end;
    },
    notice: (s) => ({ type: 'subscription_expired', title: 'Your subscription has expired', body: `Your ${s.plan.name} subscription was set not to renew and ended on ${day(s.current_period_end)}. You can subscribe again at any time.` }),
  });
}

/** Paused subscriptions whose resume_at came. */
export async function resumeDue(app: BillingServices, rc: RequestContext, subscriptions: readonly Subscription[]): Promise<Subscription[]> {
  return run(app, rc, 'resume', subscriptions.map((subscription) => ({ subscription, input: { reason: 'resume_at reached' } })), resumeOptions(false));
}

/** A declined renewal: `past_due`, with the payment_failed notice the settle wrote for it. */
export async function markPastDue(app: BillingServices, rc: RequestContext, steps: readonly Step<{ invoiceId: string; notice: Notice }>[]): Promise<Subscription[]> {
  return run(app, rc, 'mark_past_due', steps, {
    strict: false,
    reason: () => 'renewal payment declined',
    metadata: (_s, i) => ({ invoice_id: i.invoiceId }),
    apply(s) {
      s.status = 'past_due';
    },
    notice: (_s, i) => i.notice,
  });
}

/** The last retry declined: `canceled` now (the invoice is uncollectible), with the final notice. */
export async function cancelForNonpayment(app: BillingServices, rc: RequestContext, steps: readonly Step<{ invoiceId: string; notice: Notice }>[]): Promise<Subscription[]> {
  return run(app, rc, 'cancel_for_nonpayment', steps, {
    strict: false,
    reason: () => 'payment retries exhausted',
    metadata: (_s, i) => ({ invoice_id: i.invoiceId }),
    apply(s, _i, now) {
      s.status = 'canceled';
      s.canceled_at = now;
      s.ended_at = now;
    },
    notice: (_s, i) => i.notice,
  });
}

/**
 * Records the state changes of renewals the clock paid in one statement
 * (renewFromInvoices moved the period): a trial converted, a past-due
 * subscription recovered. A renewal of an active subscription changes no
 * state and records nothing here (its invoice is its record).
 */
export async function recordRenewals(app: BillingServices, rc: RequestContext, rows: readonly { id: string; user_id: string; from_status: string; plan_name: string; period_end: Date }[]): Promise<void> {
  const notices: NotifyInput[] = [];
  for (const row of rows) {
    const name: TransitionName | null = row.from_status === 'trialing' ? 'convert_trial' : row.from_status === 'past_due' ? 'recover' : null;
    if (!name) continue;
    recordAudit(rc, {
      action: TRANSITIONS[name].action, resource_type: 'subscription', resource_id: row.id, reason: name === 'recover' ? 'renewal paid' : 'trial ended',
      changes: { status: { from: row.from_status, to: 'active' } }, metadata: { user_id: row.user_id, by: 'system', transition: name },
    });
    notices.push(name === 'recover'
      ? { userId: row.user_id, type: 'payment_succeeded', title: 'Your payment went through', body: `We collected the renewal of your ${row.plan_name} subscription; it is active again until ${day(new Date(row.period_end))}.` }
      : { userId: row.user_id, type: 'payment_succeeded', priority: 'low', title: 'Your trial has ended', body: `Your ${row.plan_name} trial became a paid subscription, renewing on ${day(new Date(row.period_end))}.` });
  }
  await rc.em.flush();
  if (notices.length) await notifyMany(app, rc, notices);
}
