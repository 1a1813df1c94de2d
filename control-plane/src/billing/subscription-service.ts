// Subscriptions (document 1 §3, §4.3, §4.8; DESIGN.md §5): create (or an
// administrator's assign), change plan with proration, preview, cancel, and
// the administrator's pause, resume, reactivate, extend and patch.
//
// Rules:
// - one live subscription (trialing, active, past_due, paused) per user and
//   type: the user's row is locked for the operation, and a partial unique
//   index holds it whatever happens (409 SUBSCRIPTION_EXISTS);
// - a plan with trial_days > 0 starts `trialing` (no charge; the trial is the
//   first period), once per user and plan type; otherwise the first invoice
//   is paid at once (balance
//   first, then the card) and the subscription is `active`; a declined card
//   is a 402 and nothing is kept (the charge happens inside the transaction
//   that creates the subscription, redeems the coupon and debits the balance;
//   a charge whose transaction then fails is refunded);
// - terms (price, currency, cycle, limits) are copied from the plan at sale,
//   at a plan change and at each renewal (grandfathering until then);
// - proration to the second: the unused share of what was actually paid for
//   the rest of the period (prepaid_minor, net of discounts, with the tax
//   paid on it) is credited, the same fraction of the new plan's price is
//   charged (less a coupon given with the change); a negative total goes to
//   the balance. The preview prices it with the same function;
// - every state change goes through its named transition
//   (subscription-transitions.ts: audit with the acting party, notices);
// - nothing is billed to an account awaiting deletion (409
//   ACCOUNT_SCHEDULED_FOR_DELETION).
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { createHash } from 'node:crypto';
import { pendingDeletionSql } from '../accounts/index.ts';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { SECOND } from '../core/clock.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, assertThat, found, validationError, callerUserId as callerUserIdOf } from '../http/errors.ts';
import { LIVE_SUBSCRIPTION_STATUSES, Plan, Subscription, type BillingCycle, type SubscriptionStatus } from './billing.entities.ts';
import { couponProblem, couponRefusal, findCouponByCode, redeemCoupon } from './coupon-service.ts';
import type { Coupon } from './coupon.entity.ts';
import { draftInvoice, invoiceTotals, payNow, periodLine, quoteInvoice, withChargeCompensation, type InvoiceQuote } from './invoice-service.ts';
import type { LineItem } from './invoice.entity.ts';
import { prorate } from './money.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import { findDefaultPaymentMethod, findUserPaymentMethod } from './subscription-payment-method.ts';
import type { BillingServices } from './services.ts';
import * as transitions from './subscription-transitions.ts';

const CYCLE_MONTHS: Record<BillingCycle, number> = { monthly: 1, quarterly: 3, semi_annual: 6, annual: 12 };

/**
 * The end of a billing period that starts at `start`: the same day and time
 * `cycle` months later (UTC), or the last day of that month when it is
 * shorter (31 January + 1 month = 28/29 February).
 */
export function addCycle(start: Date, cycle: BillingCycle): Date {
  const months = start.getUTCMonth() + CYCLE_MONTHS[cycle];
  const year = start.getUTCFullYear() + Math.floor(months / 12);
  const month = months % 12;
  const lastDay = new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
  return new Date(Date.UTC(year, month, Math.min(start.getUTCDate(), lastDay), start.getUTCHours(), start.getUTCMinutes(), start.getUTCSeconds(), start.getUTCMilliseconds()));
}

/** A stable id made from a request's Idempotency-Key, so a retried request charges the gateway with the same key. */
export function derivedId(...parts: string[]): string {
  const hex = createHash('sha256').update(parts.join('\u0000')).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 3) | 8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** Copies the plan's terms onto the subscription (sale, plan change, renewal). */
export function applyTerms(subscription: Subscription, plan: Plan): void {
  subscription.plan = plan;
  subscription.type = plan.type;
  subscription.price_minor = plan.price_minor;
  subscription.currency = plan.currency;
  subscription.billing_cycle = plan.billing_cycle;
  subscription.max_profiles = plan.max_profiles;
  subscription.max_concurrent_streams = plan.max_concurrent_streams;
  subscription.max_devices = plan.max_devices;
  subscription.max_quality = plan.max_quality;
}

/** Records what was paid for the subscription's time from `from` to its period end (a paid invoice's prepaid value). */
export function prepay(subscription: Subscription, prepaid: { net: number; tax: number }, from: Date | null): void {
  subscription.prepaid_minor = prepaid.net;
  subscription.prepaid_tax_minor = prepaid.tax;
  subscription.prepaid_from = from;
}

const subscriptionExists = (type: string) =>
  new ApiError('SUBSCRIPTION_EXISTS', `A ${type} subscription is already live (trialing, active, past due or paused): cancel or change it first`);

/** Serialises one user's subscription changes (held until the transaction ends). */
async function lockUser(em: EntityManager, userId: string): Promise<void> {
  await em.execute('select id from app_user where id = ? for update', [userId]);
}

/**
 * Refuses a billing action that would charge an account awaiting deletion
 * (a pending deletion request: its subscriptions ended without refund, its
 * owner can no longer see or cancel anything): 409 ACCOUNT_SCHEDULED_FOR_DELETION.
 */
async function assertNotScheduledForDeletion(em: EntityManager, userId: string): Promise<void> {
  const [row] = await em.execute<{ pending: boolean }[]>(`select ${pendingDeletionSql('u')} as pending from app_user u where u.id = ?`, [userId]);
  assertThat(!row?.pending, new ApiError('ACCOUNT_SCHEDULED_FOR_DELETION',
    'The account is scheduled for deletion: nothing may be billed to it until its owner cancels the deletion'));
}

export const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Subscriptions belong to user accounts');

/** A subscription the caller may act on: their own, or anyone's for a global holder (an admin); 404 otherwise. */
export async function findCallersSubscription(rc: RequestContext, id: string): Promise<Subscription> {
  const userId = callerUserId(rc);
  const where = rc.access === 'global' ? { id } : { id, user: userId };
  return found(await rc.em.findOne(Subscription, where, { populate: ['plan'] }), 'Subscription');
}

/** A user's subscription (administration): 404 when it is not that user's. */
export async function findUsersSubscription(em: EntityManager, userId: string, id: string): Promise<Subscription> {
  return found(await em.findOne(Subscription, { id, user: userId }, { populate: ['plan'] }), 'Subscription');
}

/** The plan a body names, on sale: 404 when unknown, 409 when deactivated. */
async function planOnSale(em: EntityManager, planId: string, field = 'plan_id'): Promise<Plan> {
  const plan = await em.findOne(Plan, planId);
  if (!plan) throw new ApiError('NOT_FOUND', 'Plan not found', { details: { field } });
  assertThat(plan.is_active, new ApiError('CONFLICT', 'The plan is no longer on sale (deactivated)'));
  return plan;
}

/** The user's own payment method a body names: 400 on the field otherwise. */
async function usersMethod(em: EntityManager, userId: string, id: string, field = 'payment_method_id'): Promise<PaymentMethod> {
  const method = await findUserPaymentMethod(em, userId, id);
  if (!method) throw validationError([{ field, message: 'No such payment method on this account' }]);
  return method;
}

/**
 * Whether naming `method` at sale chooses it for the subscription: the
 * account's default is the one a subscription follows anyway (the create body
 * must name a method), any other is a choice (decision "Payment methods of
 * subscriptions").
 */
async function isChosen(em: EntityManager, userId: string, method: PaymentMethod | null): Promise<boolean> {
  if (!method) return false;
  return (await findDefaultPaymentMethod(em, userId))?.id !== method.id;
}

/** Whether the user ever had a trial of this plan type (any plan, any outcome): a plan's trial is offered once per user and type. */
async function hadTrial(em: EntityManager, userId: string, type: string): Promise<boolean> {
  return (await em.count(Subscription, { user: userId, type: type as Plan['type'], trial_start: { $ne: null } })) > 0;
}

/** The coupon a body names, checked (not redeemed) for the user and plan: 400 on coupon_code with its error_code otherwise. */
async function usableCoupon(em: EntityManager, code: string | undefined, plan: Plan, userId: string, now: Date): Promise<Coupon | null> {
  if (!code) return null;
  const coupon = await findCouponByCode(em, code);
  const problem = await couponProblem(em, coupon, plan, userId, now);
  if (problem) throw couponRefusal(problem);
  return coupon;
}

export interface CreateSubscriptionInput {
  userId: string;
  plan_id: string;
  /** null: complimentary (administrators only). */
  payment_method_id: string | null;
  coupon_code?: string;
  /** Administrator overrides. */
  trial_end?: Date;
  current_period_end?: Date;
  auto_renew?: boolean;
  admin_note?: string;
  idempotencyKey?: string;
}

/**
 * Creates a subscription for `input.userId` (the subscriber's create, or an
 * administrator's assign). All in one transaction with the first charge.
 */
export async function createSubscription(app: BillingServices, rc: RequestContext, input: CreateSubscriptionInput): Promise<Subscription> {
  const now = app.clock.now();
  try {
    return await withChargeCompensation(app, rc, (onCharged) => inTransaction(rc, async (tx) => {
      const em = tx.em;
      await lockUser(em, input.userId);
      await assertNotScheduledForDeletion(em, input.userId);
      const plan = await planOnSale(em, input.plan_id);
      const method = input.payment_method_id === null ? null : await usersMethod(em, input.userId, input.payment_method_id);
      const live = await em.count(Subscription, { user: input.userId, type: plan.type, status: { $in: [...LIVE_SUBSCRIPTION_STATUSES] } });
      if (live) throw subscriptionExists(plan.type);
      const coupon = await usableCoupon(em, input.coupon_code, plan, input.userId, now);
      const chosen = await isChosen(em, input.userId, method);

      // One free trial per user and plan type (decision "Trials"); an administrator's trial_end grants one anyway.
      const offersTrial = plan.trial_days > 0 && !(await hadTrial(em, input.userId, plan.type));
      const trialEnd = input.trial_end ?? (offersTrial ? new Date(now.getTime() + plan.trial_days * 86_400 * SECOND) : null);
      const trialing = trialEnd !== null && trialEnd.getTime() > now.getTime();
      const periodEnd = input.current_period_end ?? (trialing ? trialEnd : addCycle(now, plan.billing_cycle));
      if (periodEnd.getTime() <= now.getTime()) throw validationError([{ field: 'current_period_end', message: 'Must be in the future' }]);
      const subscription = em.create(Subscription, {
        ...(input.idempotencyKey ? { id: derivedId('subscription', input.userId, input.idempotencyKey) } : {}),
        user: input.userId, plan, type: plan.type, status: trialing ? 'trialing' : 'active',
        price_minor: plan.price_minor, currency: plan.currency, billing_cycle: plan.billing_cycle,
        max_profiles: plan.max_profiles, max_concurrent_streams: plan.max_concurrent_streams, max_devices: plan.max_devices, max_quality: plan.max_quality,
        auto_renew: input.auto_renew ?? true, current_period_start: now, current_period_end: periodEnd, cancel_at_period_end: false,
        trial_start: trialing ? now : null, trial_end: trialing ? periodEnd : null,
        payment_method_id: method?.id ?? null, payment_method_chosen: chosen, coupon_id: coupon?.id ?? null, created_at: now, updated_at: now,
      } as never);
      transitions.syncNextBilling(subscription);
      await em.flush();
      if (coupon) await redeemCoupon(app, tx, { code: coupon.code, userId: input.userId, planId: plan.id, subscriptionId: subscription.id });
      if (!trialing) {
        const { invoice, totals } = await draftInvoice(tx, {
          id: input.idempotencyKey ? derivedId('invoice', input.userId, input.idempotencyKey) : undefined,
          userId: input.userId, subscription, plan, reason: 'subscription_create', currency: plan.currency,
          lines: [periodLine(plan, plan.price_minor, now, periodEnd)], coupon, complimentary: method === null,
          paymentMethod: method, periodStart: now, periodEnd, description: `Subscription to ${plan.name}`,
        }, now);
        await payNow(app, tx, invoice, method, now, onCharged);
        prepay(subscription, totals.prepaid, now);
      }
      await transitions.recordCreated(app, tx, subscription, { reason: input.admin_note, metadata: { plan_id: plan.id, complimentary: method === null } });
      return subscription;
    }));
  } catch (error) {
    // Two creates that passed the check at once: the partial unique index lets one win.
    if (error instanceof UniqueConstraintViolationException && /one_live_per_type/.test(error.message)) throw subscriptionExists('such');
    throw error;
  }
}

// ---- plan change ----------------------------------------------------------

export interface Proration {
  fromPlan: Plan;
  toPlan: Plan;
  /** The unused share of what was paid for the rest of the period (net), and of the tax paid on it. */
  creditMinor: number;
  creditTaxMinor: number;
  /** The same time on the new plan, at its price. */
  chargeMinor: number;
  lines: LineItem[];
  coupon: Coupon | null;
  method: PaymentMethod | null;
  /** The change's invoice, priced by quoteInvoice (balance included); zeros for a trialing subscription, which changes free. */
  quote: InvoiceQuote;
  currency: string;
}

/**
 * The credit for the unused time of the current period: the share of what was
 * paid for it (prepaid_minor and its tax, spread from prepaid_from to the
 * period end) that is still ahead at `now`, rounded half up (never more than
 * was paid).
 */
export function unusedCredit(subscription: Subscription, now: Date): { net: number; tax: number } {
  const end = subscription.current_period_end.getTime();
  const from = (subscription.prepaid_from ?? subscription.current_period_start).getTime();
  const whole = Math.max(1, Math.round((end - from) / SECOND));
  const unused = Math.max(0, Math.min(whole, Math.floor((end - now.getTime()) / SECOND)));
  return { net: prorate(subscription.prepaid_minor, unused, whole), tax: prorate(subscription.prepaid_tax_minor, unused, whole) };
}

/**
 * The numbers of a change of `subscription` to `planId` at `now` (no writes):
 * what preview shows and change-plan invoices, priced by the one invoice
 * pricing (quoteInvoice). `lock` holds the balance row for the caller's
 * transaction (the change itself).
 */
export async function prorationOf(em: EntityManager, subscription: Subscription, planId: string, couponCode: string | undefined, now: Date, options: { lock?: boolean } = {}): Promise<Proration> {
  transitions.assertAllowed('change_plan', subscription);
  const fromPlan = subscription.plan;
  const toPlan = await planOnSale(em, planId);
  assertThat(toPlan.type === subscription.type,
    new ApiError('PLAN_TYPE_MISMATCH', `The plan is a ${toPlan.type} plan; a ${subscription.type} subscription can only change to a ${subscription.type} plan`));
  assertThat(toPlan.id !== fromPlan.id, new ApiError('CONFLICT', 'The subscription is already on this plan'));
  if (toPlan.currency !== subscription.currency) {
    throw validationError([{ field: 'plan_id', message: `The plan is priced in ${toPlan.currency}; the subscription is billed in ${subscription.currency}` }]);
  }
  const userId = subscription.user.id;
  const coupon = await usableCoupon(em, couponCode, toPlan, userId, now);
  const currency = subscription.currency;
  const method = subscription.payment_method_id ? await em.findOne(PaymentMethod, subscription.payment_method_id) : null;
  if (subscription.status === 'trialing') {
    const quote = { taxRateBp: null, taxCountry: null, totals: invoiceTotals([], { currency, taxRateBp: null }) };
    return { fromPlan, toPlan, creditMinor: 0, creditTaxMinor: 0, chargeMinor: 0, lines: [], coupon, method, quote, currency };
  }
  const start = subscription.current_period_start.getTime();
  const end = subscription.current_period_end.getTime();
  const whole = Math.max(1, Math.round((end - start) / SECOND));
  const unused = Math.max(0, Math.min(whole, Math.floor((end - now.getTime()) / SECOND)));
  const credit = unusedCredit(subscription, now);
  const chargeMinor = prorate(toPlan.price_minor, unused, whole);
  const lines: LineItem[] = [
    { description: `Unused time on ${fromPlan.name}`, quantity: 1, unit_price_minor: -credit.net, amount_minor: -credit.net, type: 'proration' },
    { description: `Remaining time on ${toPlan.name}`, quantity: 1, unit_price_minor: chargeMinor, amount_minor: chargeMinor, type: 'proration' },
  ];
  const quote = await quoteInvoice(em, { userId, currency, lines, creditTaxMinor: credit.tax, coupon, complimentary: !method, paymentMethod: method }, { lock: options.lock ?? false });
  return { fromPlan, toPlan, creditMinor: credit.net, creditTaxMinor: credit.tax, chargeMinor, lines, coupon, method, quote, currency };
}

/** The preview of a plan change of the caller's subscription (document 1 §4.3): priced as the change would be now, nothing written. */
export async function previewPlanChange(app: BillingServices, rc: RequestContext, subscriptionId: string, input: { plan_id: string; coupon_code?: string }): Promise<{ subscription: Subscription; proration: Proration }> {
  const subscription = await findCallersSubscription(rc, subscriptionId);
  return { subscription, proration: await prorationOf(rc.em, subscription, input.plan_id, input.coupon_code, app.clock.now()) };
}

/** Changes the plan now (same type): new terms at once, period unchanged, the prorated difference invoiced and charged. */
export async function changePlan(app: BillingServices, rc: RequestContext, subscriptionId: string, input: { plan_id: string; coupon_code?: string; idempotencyKey?: string; admin_note?: string; ownerId?: string }): Promise<Subscription> {
  const now = app.clock.now();
  return withChargeCompensation(app, rc, (onCharged) => inTransaction(rc, async (tx) => {
    const em = tx.em;
    const subscription = input.ownerId ? await findUsersSubscription(em, input.ownerId, subscriptionId) : await findCallersSubscription(tx, subscriptionId);
    const userId = subscription.user.id;
    await lockUser(em, userId);
    await em.refresh(subscription);
    await applyPlanChange(app, tx, subscription, input, now, onCharged);
    return subscription;
  }));
}

/** The plan change inside the caller's transaction (subscriber change-plan and the administrator's patch). */
export async function applyPlanChange(app: BillingServices, tx: RequestContext, subscription: Subscription, input: { plan_id: string; coupon_code?: string; idempotencyKey?: string; admin_note?: string }, now: Date, onCharged: (chargeId: string) => void): Promise<void> {
  const em = tx.em;
  const userId = subscription.user.id;
  await assertNotScheduledForDeletion(em, userId);
  const proration = await prorationOf(em, subscription, input.plan_id, input.coupon_code, now, { lock: true });
  const method = proration.method;
  await transitions.transition(app, tx, 'change_plan', subscription, input, {
    reason: input.admin_note,
    metadata: {
      from_plan_id: proration.fromPlan.id, proration_credit_minor: proration.creditMinor, proration_credit_tax_minor: proration.creditTaxMinor,
      proration_charge_minor: proration.chargeMinor, amount_due_now_minor: proration.quote.totals.amountDue, balance_credit_minor: proration.quote.totals.balanceCredit,
    },
    notice: { title: 'Your plan was changed', body: `An administrator moved your subscription from ${proration.fromPlan.name} to ${proration.toPlan.name}, from today.` },
    async apply(s) {
      applyTerms(s, proration.toPlan);
      await em.flush();
      if (proration.coupon) await redeemCoupon(app, tx, { code: proration.coupon.code, userId, planId: proration.toPlan.id, subscriptionId: s.id });
      if (s.status !== 'active') return; // a trialing subscription changes free
      // Priced by the quote the preview shows (taken with the balance locked): what was previewed is what is invoiced.
      const { invoice, totals } = await draftInvoice(tx, {
        id: input.idempotencyKey ? derivedId('invoice', userId, input.idempotencyKey) : undefined,
        userId, subscription: s, plan: proration.toPlan, reason: 'subscription_update', currency: s.currency, lines: proration.lines,
        creditTaxMinor: proration.creditTaxMinor, coupon: proration.coupon, complimentary: !method, paymentMethod: method,
        periodStart: now, periodEnd: s.current_period_end, description: `Plan change from ${proration.fromPlan.name} to ${proration.toPlan.name}`,
      }, now, proration.quote);
      await payNow(app, tx, invoice, method, now, onCharged);
      // The rest of the period is now worth what the new plan's time cost (the credit paid part of it).
      prepay(s, totals.prepaid, now);
    },
  });
}

// ---- cancel, pause, resume, extend, reactivate: each through its transition ------------------------

/** Cancel: immediate → canceled now, no refund; otherwise at the period end (cancel_at_period_end). Audit-logged with the reason. */
export async function cancelSubscription(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { immediate: boolean; reason?: string }): Promise<Subscription> {
  if (input.immediate) await transitions.cancelNow(app, rc, subscription, { reason: input.reason });
  else await transitions.scheduleCancel(app, rc, subscription, { reason: input.reason });
  return subscription;
}

/** Pause (administrator): billing and access suspended; resumed automatically at resume_at when given. */
export async function pauseSubscription(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { resume_at: Date | null; reason?: string }): Promise<Subscription> {
  transitions.assertAllowed('pause', subscription);
  if (input.resume_at && input.resume_at.getTime() <= app.clock.now().getTime()) throw validationError([{ field: 'resume_at', message: 'Must be in the future' }]);
  await transitions.pause(app, rc, subscription, input);
  return subscription;
}

/** Resume (administrator): see transitions.resume; refused on an account awaiting deletion. */
export async function resumeSubscription(app: BillingServices, rc: RequestContext, subscription: Subscription): Promise<Subscription> {
  transitions.assertAllowed('resume', subscription);
  await assertNotScheduledForDeletion(rc.em, subscription.user.id);
  await transitions.resume(app, rc, subscription);
  return subscription;
}

/** Extend (administrator): the period end (and a trial's end) move later by `days`; no charge; status unchanged. */
export async function extendSubscription(app: BillingServices, rc: RequestContext, subscription: Subscription, input: { days: number; reason?: string }): Promise<Subscription> {
  await transitions.extend(app, rc, subscription, input);
  return subscription;
}

/**
 * Reactivate (administrator): a canceled or expired subscription starts a new
 * period now, on its plan or another of the same type, and is charged per its
 * payment method (null: complimentary). 409 SUBSCRIPTION_EXISTS when another
 * subscription of the type is live.
 */
export async function reactivateSubscription(app: BillingServices, rc: RequestContext, userId: string, subscriptionId: string, input: { plan_id?: string; payment_method_id?: string | null; admin_note?: string }): Promise<Subscription> {
  const now = app.clock.now();
  try {
    return await withChargeCompensation(app, rc, (onCharged) => inTransaction(rc, async (tx) => {
      const em = tx.em;
      await lockUser(em, userId);
      const subscription = await findUsersSubscription(em, userId, subscriptionId);
      await em.refresh(subscription);
      await assertNotScheduledForDeletion(em, userId);
      transitions.assertAllowed('reactivate', subscription);
      const plan = input.plan_id ? await planOnSale(em, input.plan_id) : subscription.plan;
      assertThat(plan.type === subscription.type, new ApiError('PLAN_TYPE_MISMATCH', `The plan is a ${plan.type} plan; this subscription is ${subscription.type}`));
      assertThat(plan.is_active, new ApiError('CONFLICT', 'The plan is no longer on sale (deactivated): name another plan_id'));
      const methodId = input.payment_method_id === undefined ? subscription.payment_method_id ?? null : input.payment_method_id;
      const method = methodId ? await usersMethod(em, userId, methodId) : null;
      const chosen = input.payment_method_id === undefined ? subscription.payment_method_chosen && method !== null : await isChosen(em, userId, method);
      if (await em.count(Subscription, { user: userId, type: plan.type, status: { $in: [...LIVE_SUBSCRIPTION_STATUSES] } })) throw subscriptionExists(plan.type);
      await transitions.transition(app, tx, 'reactivate', subscription, input, {
        reason: input.admin_note,
        metadata: { plan_id: plan.id },
        notice: { title: 'Your subscription is back', body: `An administrator reactivated your ${plan.name} subscription from today${method ? '; its first period is charged now' : ', free of charge'}.` },
        async apply(s) {
          applyTerms(s, plan);
          Object.assign(s, {
            status: 'active' as SubscriptionStatus, current_period_start: now, current_period_end: addCycle(now, plan.billing_cycle),
            canceled_at: null, ended_at: null, cancel_at_period_end: false, auto_renew: true, paused_at: null, resume_at: null,
            payment_method_id: method?.id ?? null, payment_method_chosen: chosen,
          });
          await em.flush();
          const { invoice, totals } = await draftInvoice(tx, {
            userId, subscription: s, plan, reason: 'subscription_create', currency: plan.currency,
            lines: [periodLine(plan, plan.price_minor, now, s.current_period_end)], complimentary: !method, paymentMethod: method,
            periodStart: now, periodEnd: s.current_period_end, description: `Reactivation of ${plan.name}`,
          }, now);
          await payNow(app, tx, invoice, method, now, onCharged);
          prepay(s, totals.prepaid, now);
        },
      });
      return subscription;
    }));
  } catch (error) {
    if (error instanceof UniqueConstraintViolationException && /one_live_per_type/.test(error.message)) throw subscriptionExists('such');
    throw error;
  }
}

export interface PatchSubscriptionInput {
  plan_id?: string;
  payment_method_id?: string | null;
  auto_renew?: boolean;
  current_period_end?: Date;
  cancel_at_period_end?: boolean;
  admin_note?: string;
}

/**
 * Patch (administrator, If-Match checked by the route): each field given
 * changes; cancel_at_period_end schedules or withdraws a cancellation and a
 * plan change is prorated and charged, each through its transition; the other
 * fields are audit-logged as `subscription.updated`.
 */
export async function patchSubscription(app: BillingServices, rc: RequestContext, userId: string, subscriptionId: string, input: PatchSubscriptionInput): Promise<Subscription> {
  const now = app.clock.now();
  return withChargeCompensation(app, rc, (onCharged) => inTransaction(rc, async (tx) => {
    const em = tx.em;
    await lockUser(em, userId);
    const subscription = await findUsersSubscription(em, userId, subscriptionId);
    const fields = ['payment_method_id', 'payment_method_chosen', 'auto_renew', 'current_period_end'] as const;
    const before = Object.fromEntries(fields.map((f) => [f, subscription[f]]));
    if (input.payment_method_id !== undefined) {
      // An administrator's method is a choice for this subscription; null makes it complimentary.
      subscription.payment_method_id = input.payment_method_id === null ? null : (await usersMethod(em, userId, input.payment_method_id)).id;
      subscription.payment_method_chosen = input.payment_method_id !== null;
    }
    if (input.current_period_end) {
      if (input.current_period_end.getTime() <= subscription.current_period_start.getTime()) {
        throw validationError([{ field: 'current_period_end', message: 'Must be after current_period_start' }]);
      }
      if (subscription.trial_end && subscription.trial_end.getTime() === subscription.current_period_end.getTime()) subscription.trial_end = input.current_period_end;
      subscription.current_period_end = input.current_period_end;
    }
    if (input.auto_renew !== undefined) subscription.auto_renew = input.auto_renew;
    transitions.syncNextBilling(subscription);
    const changes = changesOf(before, Object.fromEntries(fields.map((f) => [f, subscription[f]])));
    if (Object.keys(changes).length) {
      recordAudit(tx, { action: 'subscription.updated', resource_type: 'subscription', resource_id: subscription.id, reason: input.admin_note, changes, metadata: { user_id: userId } });
    }
    if (input.cancel_at_period_end === true && !subscription.cancel_at_period_end) await transitions.scheduleCancel(app, tx, subscription, { reason: input.admin_note });
    if (input.cancel_at_period_end === false && subscription.cancel_at_period_end) await transitions.unscheduleCancel(app, tx, subscription, { reason: input.admin_note });
    if (input.plan_id && input.plan_id !== subscription.plan.id) await applyPlanChange(app, tx, subscription, { plan_id: input.plan_id, admin_note: input.admin_note }, now, onCharged);
    await em.flush();
    return subscription;
  }));
}
