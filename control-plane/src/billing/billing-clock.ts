// The billing clock (issue 10; DESIGN.md §5 "failed renewal → past_due
// (retries, then canceled)"): a recurring job that finds due work and
// processes it in batches. Safe on any number of replicas: every batch is
// claimed with FOR UPDATE SKIP LOCKED and moved to its next state in the
// claiming transaction, so two workers never take the same row.
//
// Each pass, in order:
// 1. paused subscriptions whose resume_at has come are resumed (period end
//    extended by the paused time);
// 2. period ends without a charge: cancel_at_period_end → canceled (open
//    invoices voided); auto_renew false → expired;
// 3. due renewals and trial conversions (next_billing_date ≤ now): the next
//    period is invoiced on the plan's terms *now* (grandfathering ends here),
//    the balance applied, the invoice numbered and committed `open` — or paid
//    at once when nothing is left to charge (complimentary ones, a balance
//    that covers it); next_billing_date is cleared by the same transaction,
//    so the renewal is claimed once;
// 4. open invoices whose next attempt is due: the attempt is recorded
//    `pending` with the key `invoice:<id>:<n>` and the invoice's next attempt
//    moved a lease ahead, and that commits before the gateway is called. A
//    worker that dies after the charge leaves a pending attempt; once the
//    lease passes, the next worker charges again with the same key, and the
//    gateway answers the first charge instead of charging twice. The result
//    settles invoice and subscription in one transaction: paid → active with
//    the invoice's period and terms; declined → past_due, a payment_failed
//    notification and a retry after 1, 3 and 5 days; the last decline →
//    invoice uncollectible, subscription canceled.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { recordAudit } from '../audit/audit.ts';
import { DAY, MINUTE } from '../core/clock.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { jobsFor } from '../jobs/index.ts';
import { notify } from '../notifications/notify.ts';
import { Subscription } from './billing.entities.ts';
import { Coupon } from './coupon.entity.ts';
import { applyBalance, chargeKey, draftInvoice, finalizeInvoice, markPaid, periodLine } from './invoice-service.ts';
import { Invoice, InvoiceCharge } from './invoice.entity.ts';
import { toMajor } from './money.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import type { BillingServices } from './services.ts';
import { addCycle, applyTerms, resumeInPlace, syncNextBilling } from './subscription-service.ts';

/** Delays before the retries of a declined renewal: 1, 3 and 5 days after the previous attempt (4 attempts in all). */
export const RETRY_DELAYS_MS = [1 * DAY, 3 * DAY, 5 * DAY] as const;
/** How long a claimed charge attempt is left to its worker before another may take it over (and charge with the same key). */
export const CHARGE_LEASE_MS = 10 * MINUTE;
/** Rows per claim. */
export const BATCH_SIZE = 100;

export interface ClockSummary {
  resumed: number;
  canceled: number;
  expired: number;
  invoiced: number;
  paid: number;
  declined: number;
  uncollectible: number;
}

const live = { $in: ['trialing', 'active', 'past_due'] } as const;
const skipLocked = { lockMode: LockMode.PESSIMISTIC_PARTIAL_WRITE, limit: BATCH_SIZE } as const;

/** Runs every due piece of billing work to the end (as the recurring job does). */
export async function runBillingClock(app: BillingServices, rc: RequestContext): Promise<ClockSummary> {
  const summary: ClockSummary = { resumed: 0, canceled: 0, expired: 0, invoiced: 0, paid: 0, declined: 0, uncollectible: 0 };
  for (;;) {
    const now = app.clock.now();
    const moved = await periodEnds(app, rc, now, summary) + await invoiceRenewals(app, rc, now, summary) + await chargeDueInvoices(app, rc, now, summary);
    if (moved === 0) return summary;
  }
}

/** Step 1 and 2: resumptions and period ends that need no charge. */
async function periodEnds(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary): Promise<number> {
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    const resuming = await em.find(Subscription, { status: 'paused', resume_at: { $lte: now } }, skipLocked);
    for (const s of resuming) {
      resumeInPlace(s, now);
      recordAudit(tx, { action: 'subscription.resumed', resource_type: 'subscription', resource_id: s.id, reason: 'resume_at reached', metadata: { user_id: s.user.id } });
    }
    const canceling = await em.find(Subscription, { status: live, cancel_at_period_end: true, current_period_end: { $lte: now } }, skipLocked);
    for (const s of canceling) {
      s.status = 'canceled';
      s.canceled_at = s.current_period_end;
      syncNextBilling(s);
    }
    if (canceling.length) {
      await em.nativeUpdate(Invoice, { subscription: { $in: canceling.map((s) => s.id) }, status: 'open' }, { status: 'void', next_attempt_at: null });
    }
    const expiring = await em.find(Subscription, { status: { $in: ['trialing', 'active'] }, auto_renew: false, cancel_at_period_end: false, current_period_end: { $lte: now } }, skipLocked);
    for (const s of expiring) {
      s.status = 'expired';
      syncNextBilling(s);
    }
    await em.flush();
    summary.resumed += resuming.length;
    summary.canceled += canceling.length;
    summary.expired += expiring.length;
    return resuming.length + canceling.length + expiring.length;
  });
}

/** Whether the subscription's coupon still discounts: once, on its first paid period (decision "Billing": coupon duration). */
async function couponForRenewal(em: EntityManager, subscription: Subscription): Promise<Coupon | null> {
  if (!subscription.coupon_id) return null;
  const used = await em.count(Invoice, { subscription: subscription.id, coupon_id: subscription.coupon_id, status: { $in: ['open', 'paid', 'uncollectible'] } });
  return used ? null : em.findOne(Coupon, subscription.coupon_id);
}

/** Step 3: claims due renewals and trial conversions and invoices their next period. */
async function invoiceRenewals(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary): Promise<number> {
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    const due = await em.find(Subscription, { status: { $in: ['trialing', 'active'] }, next_billing_date: { $lte: now } }, { ...skipLocked, populate: ['plan'] });
    for (const subscription of due) {
      const plan = subscription.plan;
      const start = subscription.current_period_end;
      const end = addCycle(start, plan.billing_cycle);
      const method = subscription.payment_method_id ? await em.findOne(PaymentMethod, subscription.payment_method_id) : null;
      const invoice = await draftInvoice(tx, {
        userId: subscription.user.id, subscription, plan, reason: 'subscription_cycle', currency: plan.currency,
        lines: [periodLine(plan, plan.price_minor, start, end)], coupon: await couponForRenewal(em, subscription), complimentary: !subscription.payment_method_id,
        paymentMethod: method, periodStart: start, periodEnd: end,
        description: subscription.status === 'trialing' ? `${plan.name} after the trial` : `Renewal of ${plan.name}`,
      }, now);
      invoice.due_date = start;
      await applyBalance(tx, invoice);
      await finalizeInvoice(tx, invoice, now);
      subscription.next_billing_date = null;
      if (invoice.amount_due_minor === 0) {
        markPaid(invoice, now);
        renew(subscription, invoice);
        summary.paid += 1;
      } else {
        invoice.next_attempt_at = now;
      }
    }
    await em.flush();
    summary.invoiced += due.length;
    return due.length;
  });
}

/** A paid period invoice renews its subscription: its period and the terms of its plan (grandfathering ends here). */
function renew(subscription: Subscription, invoice: Invoice): void {
  applyTerms(subscription, invoice.plan);
  subscription.status = 'active';
  subscription.current_period_start = invoice.period_start;
  subscription.current_period_end = invoice.period_end;
  syncNextBilling(subscription);
}

interface ClaimedAttempt {
  invoiceId: string;
  chargeId: string;
  key: string;
  userId: string;
  amountMinor: number;
  currency: string;
  gatewayMethodId: string | null;
}

/** Step 4: claims open invoices whose attempt is due, charges them and settles each. */
async function chargeDueInvoices(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary): Promise<number> {
  const claimed = await inTransaction(rc, async (tx) => {
    const em = tx.em;
    const due = await em.find(Invoice, { status: 'open', next_attempt_at: { $lte: now } }, skipLocked);
    const attempts: ClaimedAttempt[] = [];
    for (const invoice of due) {
      // A pending attempt is one a worker claimed and never settled (it died): charge again with its key.
      let charge = await em.findOne(InvoiceCharge, { invoice, status: 'pending' });
      const subscription = await em.findOneOrFail(Subscription, invoice.subscription.id);
      const methodId = charge?.payment_method_id ?? subscription.payment_method_id;
      const method = methodId ? await em.findOne(PaymentMethod, methodId) : null;
      if (!charge && method) {
        const attempt = invoice.attempt_count + 1;
        charge = em.create(InvoiceCharge, {
          invoice, attempt, idempotency_key: chargeKey(invoice.id, attempt), status: 'pending', amount_minor: invoice.amount_due_minor,
          currency: invoice.currency, payment_method_id: method.id, gateway_charge_id: null, decline_reason: null, created_at: now, settled_at: null,
        } as never);
      }
      invoice.next_attempt_at = new Date(now.getTime() + CHARGE_LEASE_MS);
      attempts.push({
        invoiceId: invoice.id, chargeId: charge?.id ?? '', key: charge?.idempotency_key ?? '', userId: invoice.user.id,
        amountMinor: charge?.amount_minor ?? invoice.amount_due_minor, currency: invoice.currency, gatewayMethodId: method?.gateway_payment_method_id ?? null,
      });
    }
    await em.flush();
    return attempts;
  });
  for (const attempt of claimed) {
    const result = attempt.gatewayMethodId
      ? await app.paymentGateway.charge({
        paymentMethodId: attempt.gatewayMethodId, customerRef: attempt.userId, amountMinor: attempt.amountMinor, currency: attempt.currency, idempotencyKey: attempt.key,
      })
      : { status: 'declined' as const, reason: 'card_declined' as const, message: 'The subscription has no payment method' };
    await settleAttempt(app, rc, attempt, result, summary);
  }
  return claimed.length;
}

type Result = Awaited<ReturnType<BillingServices['paymentGateway']['charge']>>;

async function settleAttempt(app: BillingServices, rc: RequestContext, attempt: ClaimedAttempt, result: Result, summary: ClockSummary): Promise<void> {
  const now = app.clock.now();
  const notice = await inTransaction(rc, async (tx) => {
    const em = tx.em;
    const invoice = await em.findOneOrFail(Invoice, attempt.invoiceId, { lockMode: LockMode.PESSIMISTIC_WRITE, populate: ['plan'] });
    const charge = attempt.chargeId ? await em.findOne(InvoiceCharge, attempt.chargeId) : null;
    if (charge && charge.status !== 'pending') return null; // settled by a worker that took the claim over
    if (invoice.status !== 'open') {
      // Voided meanwhile (the subscription was canceled): give the money back.
      if (result.status === 'succeeded') await app.paymentGateway.refund({ chargeId: result.chargeId, idempotencyKey: `refund:${result.chargeId}`, reason: 'invoice voided' });
      if (charge) Object.assign(charge, { status: result.status, settled_at: now, gateway_charge_id: result.status === 'succeeded' ? result.chargeId : null });
      await em.flush();
      return null;
    }
    const subscription = await em.findOneOrFail(Subscription, invoice.subscription.id, { lockMode: LockMode.PESSIMISTIC_WRITE });
    if (charge) {
      charge.status = result.status;
      charge.settled_at = now;
      charge.gateway_charge_id = result.status === 'succeeded' ? result.chargeId : null;
      charge.decline_reason = result.status === 'declined' ? result.reason : null;
    }
    invoice.attempt_count += 1;
    if (result.status === 'succeeded') {
      markPaid(invoice, now);
      renew(subscription, invoice);
      summary.paid += 1;
      await em.flush();
      return null;
    }
    summary.declined += 1;
    const retry = RETRY_DELAYS_MS[invoice.attempt_count - 1];
    if (retry === undefined) {
      invoice.status = 'uncollectible';
      invoice.next_attempt_at = null;
      subscription.status = 'canceled';
      subscription.canceled_at = now;
      syncNextBilling(subscription);
      recordAudit(tx, { action: 'subscription.canceled', resource_type: 'subscription', resource_id: subscription.id, reason: 'payment retries exhausted', metadata: { user_id: subscription.user.id, invoice_id: invoice.id } });
      summary.uncollectible += 1;
    } else {
      invoice.next_attempt_at = new Date(now.getTime() + retry);
      subscription.status = 'past_due';
      syncNextBilling(subscription);
    }
    await em.flush();
    const amount = `${toMajor(invoice.amount_due_minor, invoice.currency)} ${invoice.currency}`;
    return {
      userId: subscription.user.id,
      title: retry === undefined ? 'Your subscription was canceled' : 'Your payment failed',
      body: retry === undefined
        ? `We could not collect ${amount} for invoice ${invoice.invoice_number} after several attempts, so the subscription has ended.`
        : `We could not collect ${amount} for invoice ${invoice.invoice_number} (${result.message}). We will try again on ${invoice.next_attempt_at!.toISOString().slice(0, 10)}; you can update your payment method meanwhile.`,
    };
  });
  // After the commit: the notification in its own unit of work, its e-mail per the category rules (payment).
  if (notice) await notify(app, rc, { userId: notice.userId, type: 'payment_failed', priority: 'high', title: notice.title, body: notice.body });
}

const defineJob = jobsFor<BillingServices>();

/** Every minute, on whichever replica claims the period; batches inside claim with SKIP LOCKED, so replicas share the work. */
export const billingClockJob = defineJob({
  type: 'billing.clock',
  payload: z.object({}),
  recurring: { every: MINUTE },
  retry: { attempts: 3, baseDelayMs: 10_000 },
  async handler(rc, _payload, app) {
    const summary = await runBillingClock(app, rc);
    if (Object.values(summary).some((n) => n > 0)) rc.log.info(summary, 'billing clock');
  },
});
