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
// 3. due renewals and trial conversions (next_billing_date ≤ now), set-based:
//    one statement claims a batch (SKIP LOCKED) and clears next_billing_date,
//    so each renewal is claimed once, and reads the plan's terms *now*
//    (grandfathering ends here), method, tax rate, coupon and balance; the
//    invoices are built in memory with the same money functions, the balance
//    applied, numbered from one block of the year's counter and inserted with
//    their first charge attempts `pending` (key `invoice:<id>:1`) in one
//    multi-row statement each — or paid at once when nothing is left to
//    charge (complimentary ones, a balance that covers it). That commits
//    before the gateway is called;
// 4. open invoices whose next attempt is due (retries, attempts a dead worker
//    left pending): claimed the same way, the attempt recorded `pending` and
//    the invoice's next attempt moved a lease ahead, committed before the
//    gateway is called. A worker that dies after the charge leaves a pending
//    attempt; once the lease passes, the next worker charges again with the
//    same key, and the gateway answers the first charge instead of charging
//    twice.
// Charges run CHARGE_CONCURRENCY at a time; their results settle in one
// transaction with one statement per outcome: paid → active with the
// invoice's period and terms; declined → past_due, a payment_failed
// notification (in the same transaction; its e-mail after the commit) and a
// retry after 1, 3 and 5 days; the last decline → invoice uncollectible,
// subscription canceled.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { DAY, MINUTE } from '../core/clock.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ids, idList, insertRows, recordset, type Columns } from '../db/bulk.ts';
import { jobsFor } from '../jobs/index.ts';
import { notifyMany } from '../notifications/index.ts';
import { debitBalance } from './balance-service.ts';
import { Subscription, type BillingCycle } from './billing.entities.ts';
import type { Coupon } from './coupon.entity.ts';
import { chargeKey, invoiceNumber, invoiceTotals, periodLine, takeInvoiceNumbers } from './invoice-service.ts';
import { toMajor } from './money.ts';
import type { BillingServices } from './services.ts';
import { addCycle } from './subscription-service.ts';
import { allows, cancelForNonpayment, endAtPeriodEnd, expire, markPastDue, recordRenewals, RENEWABLE_FROM, resumeDue, type Notice } from './subscription-transitions.ts';

/** Delays before the retries of a declined renewal: 1, 3 and 5 days after the previous attempt (4 attempts in all). */
export const RETRY_DELAYS_MS = [1 * DAY, 3 * DAY, 5 * DAY] as const;
/** How long a claimed charge attempt is left to its worker before another may take it over (and charge with the same key). */
export const CHARGE_LEASE_MS = 10 * MINUTE;
/** Rows per claim of the steps that go through the ORM (resumptions, period ends). */
export const BATCH_SIZE = 100;
/** Rows per claim of renewals and due charge attempts (set-based statements). */
export const RENEWAL_BATCH = 1000;
/** Gateway calls in flight at once per worker. */
export const CHARGE_CONCURRENCY = 16;

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

/** The same context with an entity manager of its own (a request's context is a class: its getters do not spread). */
const withFreshUnitOfWork = (rc: RequestContext): RequestContext => ({
  requestId: rc.requestId, ip: rc.ip, userAgent: rc.userAgent, locale: rc.locale, profileToken: rc.profileToken, actor: rc.actor, access: rc.access,
  em: rc.em.fork(), log: rc.log,
});

/** Runs every due piece of billing work to the end (as the recurring job does). */
export async function runBillingClock(app: BillingServices, rc: RequestContext): Promise<ClockSummary> {
  const summary: ClockSummary = { resumed: 0, canceled: 0, expired: 0, invoiced: 0, paid: 0, declined: 0, uncollectible: 0 };
  for (;;) {
    const now = app.clock.now();
    // A fresh unit of work per pass: entities loaded by earlier passes are not carried (and checked by every flush) forever.
    const pass = withFreshUnitOfWork(rc);
    const moved = await periodEnds(app, pass, now, summary) + await invoiceRenewals(app, pass, now, summary) + await chargeDueInvoices(app, pass, now, summary);
    if (moved === 0) return summary;
  }
}

/** Step 1 and 2: resumptions and period ends that need no charge, through their transitions (the system acting). */
async function periodEnds(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary): Promise<number> {
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    const claim = { ...skipLocked, populate: ['plan'] } as const;
    const resumed = await resumeDue(app, tx, await em.find(Subscription, { status: 'paused', resume_at: { $lte: now } }, claim));
    const canceled = await endAtPeriodEnd(app, tx, await em.find(Subscription, { status: live, cancel_at_period_end: true, current_period_end: { $lte: now } }, claim));
    const expired = await expire(app, tx,
      await em.find(Subscription, { status: { $in: ['trialing', 'active'] }, auto_renew: false, cancel_at_period_end: false, current_period_end: { $lte: now } }, claim));
    summary.resumed += resumed.length;
    summary.canceled += canceled.length;
    summary.expired += expired.length;
    return resumed.length + canceled.length + expired.length;
  });
}

/** A claimed due subscription with what its renewal invoice needs (plan terms now, method, tax rate, coupon, balance). */
interface DueRow {
  id: string;
  user_id: string;
  plan_id: string;
  status: string;
  current_period_end: Date;
  subscription_method_id: string | null;
  plan_name: string;
  price_minor: string;
  currency: string;
  billing_cycle: BillingCycle;
  method_id: string | null;
  gateway_payment_method_id: string | null;
  billing_country: string | null;
  rate_bp: number | null;
  coupon_id: string | null;
  discount_type: 'percent' | 'amount' | null;
  percent_off_bp: number | null;
  amount_off_minor: string | null;
  coupon_currency: string | null;
  balance_minor: string | null;
}

/**
 * Claims up to RENEWAL_BATCH due subscriptions (clearing next_billing_date, so
 * each is claimed once) and reads what their invoices need, in one statement.
 * The coupon is the subscription's while no invoice has used it yet (it
 * discounts one paid period: decision "Billing": coupon duration).
 */
const claimDueSubscriptions = `
  with claimed as (
    update billing_subscription s set next_billing_date = null, updated_at = ?, version = s.version + 1
    where s.id = any(array(
      select id from billing_subscription where status in ('trialing', 'active') and next_billing_date <= ?
      order by next_billing_date limit ? for update skip locked))
    returning s.id, s.user_id, s.plan_id, s.status, s.current_period_end, s.payment_method_id, s.coupon_id)
  select c.id, c.user_id, c.plan_id, c.status, c.current_period_end, c.payment_method_id as subscription_method_id,
         p.name as plan_name, p.price_minor, p.currency, p.billing_cycle,
         pm.id as method_id, pm.gateway_payment_method_id, upper(pm.billing_country) as billing_country, t.rate_bp,
         co.id as coupon_id, co.discount_type, co.percent_off_bp, co.amount_off_minor, co.currency as coupon_currency,
         b.balance_minor
  from claimed c
  join billing_plan p on p.id = c.plan_id
  left join billing_payment_method pm on pm.id = c.payment_method_id
  left join billing_tax_rate t on t.country = upper(pm.billing_country) and t.rate_bp > 0
  left join billing_coupon co on co.id = c.coupon_id and not exists (
    select 1 from billing_invoice i where i.subscription_id = c.id and i.coupon_id = c.coupon_id and i.status in ('open', 'paid', 'uncollectible'))
  left join billing_account_balance b on b.user_id = c.user_id and b.currency = p.currency and b.balance_minor > 0`;

const invoiceColumns: Columns = {
  id: 'uuid', user_id: 'uuid', subscription_id: 'uuid', plan_id: 'uuid', invoice_number: 'text', status: 'text', billing_reason: 'text', currency: 'text',
  amount_minor: 'bigint', discount_minor: 'bigint', tax_minor: 'bigint', tax_rate_bp: 'int', tax_country: 'text', balance_applied_minor: 'bigint',
  balance_credit_minor: 'bigint', amount_due_minor: 'bigint', amount_paid_minor: 'bigint', description: 'text', line_items: 'jsonb', coupon_id: 'uuid', payment_method_id: 'uuid',
  period_start: 'timestamptz', period_end: 'timestamptz', due_date: 'timestamptz', paid_at: 'timestamptz', attempt_count: 'int',
  next_attempt_at: 'timestamptz', created_at: 'timestamptz', updated_at: 'timestamptz',
};
const chargeColumns: Columns = {
  id: 'uuid', invoice_id: 'uuid', attempt: 'int', idempotency_key: 'text', status: 'text', amount_minor: 'bigint', currency: 'text',
  payment_method_id: 'uuid', created_at: 'timestamptz',
};

/** A pending charge attempt to record for an invoice (attempt n, key invoice:<id>:<n>), and what the gateway is sent. */
function pendingCharge(invoiceId: string, attempt: number, amountMinor: number, currency: string, methodId: string, now: Date) {
  return { id: crypto.randomUUID(), invoice_id: invoiceId, attempt, idempotency_key: chargeKey(invoiceId, attempt), status: 'pending', amount_minor: amountMinor, currency, payment_method_id: methodId, created_at: now };
}

/**
 * Paid period invoices renew their subscriptions: the invoice's period and
 * its plan's terms (grandfathering ends here), prepaid with what the invoice
 * charged for the period (its amount less the discount, and its tax), in one
 * statement. Only subscriptions in a state the transition table lets a renewal
 * leave from (RENEWABLE_FROM) are renewed; the others keep their state.
 */
async function renewFromInvoices(em: EntityManager, invoiceIds: readonly string[], now: Date): Promise<RenewedRow[]> {
  if (!invoiceIds.length) return [];
  return em.execute<RenewedRow[]>(`
    with before as (
      select s.id, s.status from billing_subscription s join billing_invoice i on i.subscription_id = s.id
      where i.id = any(${idList}) and s.status = any(array(select jsonb_array_elements_text(?::jsonb))) for update of s)
    update billing_subscription s
       set plan_id = p.id, type = p.type, price_minor = p.price_minor, currency = p.currency, billing_cycle = p.billing_cycle,
           max_profiles = p.max_profiles, max_concurrent_streams = p.max_concurrent_streams, max_devices = p.max_devices, max_quality = p.max_quality,
           status = 'active', current_period_start = i.period_start, current_period_end = i.period_end,
           prepaid_minor = i.amount_minor - i.discount_minor, prepaid_tax_minor = i.tax_minor, prepaid_from = i.period_start,
           next_billing_date = case when s.auto_renew and not s.cancel_at_period_end then i.period_end end,
           updated_at = ?, version = s.version + 1
      from billing_invoice i join billing_plan p on p.id = i.plan_id, before b
     where i.id = any(${idList}) and s.id = i.subscription_id and b.id = s.id
     returning s.id, s.user_id, b.status as from_status, p.name as plan_name, s.current_period_end as period_end`,
    [ids(invoiceIds), JSON.stringify(RENEWABLE_FROM), now, ids(invoiceIds)]);
}

/** A subscription a paid period invoice renewed, with the state it left (recordRenewals records trial conversions and recoveries). */
interface RenewedRow {
  id: string;
  user_id: string;
  from_status: string;
  plan_name: string;
  period_end: Date;
}

/**
 * Step 3: claims due renewals and trial conversions and invoices their next
 * period on the plan's terms now, in one transaction: the balance applied,
 * invoices numbered from one block of the year's counter (taken last, so the
 * counter row is locked briefly and a rollback returns the numbers), paid at
 * once when nothing is left to charge; otherwise open with its first charge
 * attempt recorded pending. Once that commits, the attempts are charged.
 */
async function invoiceRenewals(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary): Promise<number> {
  const claimed = await inTransaction(rc, async (tx) => {
    const em = tx.em;
    const due = await em.execute<DueRow[]>(claimDueSubscriptions, [now, now, RENEWAL_BATCH]);
    const invoices: Record<string, unknown>[] = [];
    const charges: ReturnType<typeof pendingCharge>[] = [];
    const attempts: ClaimedAttempt[] = [];
    const paidAtOnce: string[] = [];
    for (const row of due) {
      const start = new Date(row.current_period_end);
      const end = addCycle(start, row.billing_cycle);
      const plan = { name: row.plan_name };
      const lines = [periodLine(plan, Number(row.price_minor), start, end)];
      // Complimentary (an administrator's assignment without a payment method): invoiced fully discounted, nothing charged.
      const complimentary = row.subscription_method_id === null;
      const taxRateBp = complimentary ? null : row.rate_bp;
      const coupon = row.coupon_id
        ? { id: row.coupon_id, discount_type: row.discount_type, percent_off_bp: row.percent_off_bp, amount_off_minor: row.amount_off_minor === null ? null : Number(row.amount_off_minor), currency: row.coupon_currency } as Coupon
        : null;
      const pricing = { coupon, complimentary, currency: row.currency, taxRateBp };
      const id = crypto.randomUUID();
      // The one invoice pricing (invoiceTotals), with the balance this renewal could take from the locked balance row.
      const before = invoiceTotals(lines, pricing).total;
      const balance = before > 0 && row.balance_minor !== null
        ? await debitBalance(tx, { userId: row.user_id, currency: row.currency, maxMinor: before, source: 'invoice', referenceId: id })
        : 0;
      const totals = invoiceTotals(lines, { ...pricing, balanceMinor: balance });
      const paid = totals.amountDue === 0;
      invoices.push({
        id, user_id: row.user_id, subscription_id: row.id, plan_id: row.plan_id, status: paid ? 'paid' : 'open', billing_reason: 'subscription_cycle',
        currency: row.currency, amount_minor: totals.amount, discount_minor: totals.discount, tax_minor: totals.tax, tax_rate_bp: taxRateBp,
        tax_country: taxRateBp ? row.billing_country : null, balance_applied_minor: totals.balanceApplied, balance_credit_minor: totals.balanceCredit,
        amount_due_minor: totals.amountDue, amount_paid_minor: paid ? totals.amountDue : 0,
        description: row.status === 'trialing' ? `${row.plan_name} after the trial` : `Renewal of ${row.plan_name}`, line_items: lines,
        coupon_id: coupon?.id ?? null, payment_method_id: row.method_id, period_start: start, period_end: end, due_date: start,
        paid_at: paid ? now : null, attempt_count: 0, next_attempt_at: paid ? null : row.method_id ? new Date(now.getTime() + CHARGE_LEASE_MS) : now,
        created_at: now, updated_at: now,
      });
      if (paid) paidAtOnce.push(id);
      else if (row.method_id) {
        const charge = pendingCharge(id, 1, totals.amountDue, row.currency, row.method_id, now);
        charges.push(charge);
        attempts.push({ invoiceId: id, chargeId: charge.id, key: charge.idempotency_key, userId: row.user_id, amountMinor: totals.amountDue, currency: row.currency, gatewayMethodId: row.gateway_payment_method_id });
      }
      // An invoice to charge whose method is gone waits for step 4 (due now), which records the decline.
    }
    if (invoices.length) {
      const year = now.getUTCFullYear();
      const first = await takeInvoiceNumbers(em, year, invoices.length);
      invoices.forEach((invoice, i) => (invoice.invoice_number = invoiceNumber(year, first + i)));
      await insertRows(em, 'billing_invoice', invoiceColumns, invoices);
      await insertRows(em, 'billing_invoice_charge', chargeColumns, charges);
      await recordRenewals(app, tx, await renewFromInvoices(em, paidAtOnce, now));
    }
    summary.invoiced += due.length;
    summary.paid += paidAtOnce.length;
    return { count: due.length, attempts };
  });
  await chargeAndSettle(app, rc, claimed.attempts, summary);
  return claimed.count;
}

interface ClaimedAttempt {
  invoiceId: string;
  /** The pending attempt (null: nothing to charge the invoice to; it is declined without a call). */
  chargeId: string | null;
  key: string;
  userId: string;
  amountMinor: number;
  currency: string;
  gatewayMethodId: string | null;
}

/**
 * Step 4: claims open invoices whose attempt is due (retries, and attempts
 * whose worker died), charges them and settles them; `only` limits it to
 * those invoices (a retry at once after a payment method change).
 */
async function chargeDueInvoices(app: BillingServices, rc: RequestContext, now: Date, summary: ClockSummary, only?: readonly string[]): Promise<number> {
  const claimed = await inTransaction(rc, async (tx) => {
    const em = tx.em;
    const due = await em.execute<{
      id: string; user_id: string; amount_due_minor: string; currency: string; attempt_count: number; charge_id: string | null;
      idempotency_key: string | null; charge_amount: string | null; method_id: string | null; gateway_payment_method_id: string | null;
    }[]>(`
      with claimed as (
        update billing_invoice i set next_attempt_at = ?, updated_at = ?, version = i.version + 1
        where i.id = any(array(
          select id from billing_invoice where status = 'open' and next_attempt_at <= ?${only ? ` and id = any(${idList})` : ''}
          order by next_attempt_at limit ? for update skip locked))
        returning i.id, i.user_id, i.subscription_id, i.amount_due_minor, i.currency, i.attempt_count)
      select c.id, c.user_id, c.amount_due_minor, c.currency, c.attempt_count,
             ch.id as charge_id, ch.idempotency_key, ch.amount_minor as charge_amount, pm.id as method_id, pm.gateway_payment_method_id
      from claimed c
      join billing_subscription s on s.id = c.subscription_id
      left join billing_invoice_charge ch on ch.invoice_id = c.id and ch.status = 'pending'
      left join billing_payment_method pm on pm.id = coalesce(ch.payment_method_id, s.payment_method_id)`,
    [new Date(now.getTime() + CHARGE_LEASE_MS), now, now, ...(only ? [ids(only)] : []), RENEWAL_BATCH]);
    const charges: ReturnType<typeof pendingCharge>[] = [];
    const attempts = due.map((row): ClaimedAttempt => {
      // A pending attempt is one a worker claimed and never settled (it died): charge again with its key.
      let chargeId = row.charge_id;
      let key = row.idempotency_key ?? '';
      const amountMinor = Number(row.charge_amount ?? row.amount_due_minor);
      if (!chargeId && row.method_id) {
        const charge = pendingCharge(row.id, row.attempt_count + 1, amountMinor, row.currency, row.method_id, now);
        charges.push(charge);
        chargeId = charge.id;
        key = charge.idempotency_key;
      }
      return { invoiceId: row.id, chargeId, key, userId: row.user_id, amountMinor, currency: row.currency, gatewayMethodId: row.gateway_payment_method_id };
    });
    await insertRows(em, 'billing_invoice_charge', chargeColumns, charges);
    return attempts;
  });
  await chargeAndSettle(app, rc, claimed, summary);
  return claimed.length;
}

type Result = Awaited<ReturnType<BillingServices['paymentGateway']['charge']>>;

/**
 * Charges the committed attempts (CHARGE_CONCURRENCY at a time) and settles
 * what was answered in one transaction. A gateway call that throws leaves its
 * attempt pending (taken over with the same key once the lease passes); the
 * first such error is thrown after the others are settled.
 */
async function chargeAndSettle(app: BillingServices, rc: RequestContext, attempts: readonly ClaimedAttempt[], summary: ClockSummary): Promise<void> {
  if (!attempts.length) return;
  const answered: { attempt: ClaimedAttempt; result: Result }[] = [];
  const failures: unknown[] = [];
  let next = 0;
  const lane = async () => {
    while (next < attempts.length) {
      const attempt = attempts[next++]!;
      try {
        const result: Result = attempt.gatewayMethodId
          ? await app.paymentGateway.charge({
            paymentMethodId: attempt.gatewayMethodId, customerRef: attempt.userId, amountMinor: attempt.amountMinor, currency: attempt.currency, idempotencyKey: attempt.key,
          })
          : { status: 'declined', reason: 'card_declined', message: 'The subscription has no payment method' };
        answered.push({ attempt, result });
      } catch (error) {
        failures.push(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CHARGE_CONCURRENCY, attempts.length) }, lane));
  if (answered.length) await settle(app, rc, answered, summary);
  if (failures.length) throw failures[0];
}

const chargeResultColumns: Columns = { id: 'uuid', status: 'text', gateway_charge_id: 'text', decline_reason: 'text' };

/** A declined attempt of an open invoice, and the payment_failed notice its subscriber gets. */
interface Decline {
  invoiceId: string;
  subscriptionId: string;
  userId: string;
  /** The last attempt: the subscription is canceled. */
  last: boolean;
  notice: Notice;
}

/**
 * Moves the subscriptions of declined invoices through their transitions:
 * a first decline makes an active or trialing one past_due; the last cancels
 * it for nonpayment; each carries its payment_failed notice. A retry declined
 * again changes no state: its notice goes alone.
 */
async function settleDeclines(app: BillingServices, tx: RequestContext, declines: readonly Decline[]): Promise<void> {
  const subscriptions = new Map((await tx.em.find(Subscription, { id: { $in: declines.map((d) => d.subscriptionId) } }, { populate: ['plan'], refresh: true }))
    .map((s) => [s.id, s]));
  const step = (d: Decline) => ({ subscription: subscriptions.get(d.subscriptionId)!, input: { invoiceId: d.invoiceId, notice: d.notice } });
  const pastDue = declines.filter((d) => !d.last && allows('mark_past_due', subscriptions.get(d.subscriptionId)!.status));
  const again = declines.filter((d) => !d.last && !pastDue.includes(d));
  await markPastDue(app, tx, pastDue.map(step));
  await cancelForNonpayment(app, tx, declines.filter((d) => d.last).map(step));
  if (again.length) await notifyMany(app, tx, again.map((d) => ({ userId: d.userId, ...d.notice, type: d.notice.type ?? 'payment_failed' })));
}

/**
 * Settles answered attempts in one transaction: each invoice locked and
 * checked (an attempt a worker that took the claim over has settled is left
 * alone; a charge for an invoice voided meanwhile is refunded), then one
 * statement per outcome: paid → active with the invoice's period and terms;
 * declined → past_due and a retry after 1, 3 and 5 days; the last decline →
 * invoice uncollectible, subscription canceled. The payment_failed
 * notifications are part of the transaction (their e-mails go after it commits).
 */
async function settle(app: BillingServices, rc: RequestContext, answered: readonly { attempt: ClaimedAttempt; result: Result }[], summary: ClockSummary): Promise<void> {
  const now = app.clock.now();
  await inTransaction(rc, async (tx) => {
    const em = tx.em;
    const invoiceIds = answered.map((a) => a.attempt.invoiceId);
    const invoices = new Map((await em.execute<{ id: string; status: string; attempt_count: number; subscription_id: string; amount_due_minor: string; currency: string; invoice_number: string }[]>(
      `select id, status, attempt_count, subscription_id, amount_due_minor, currency, invoice_number from billing_invoice where id = any(${idList}) order by id for update`,
      [ids(invoiceIds)])).map((row) => [row.id, row]));
    const chargeIds = answered.flatMap((a) => (a.attempt.chargeId ? [a.attempt.chargeId] : []));
    const pending = new Set((await em.execute<{ id: string }[]>(
      `select id from billing_invoice_charge where id = any(${idList}) and status = 'pending'`, [ids(chargeIds)])).map((row) => row.id));
    const chargeResults: Record<string, unknown>[] = [];
    const paid: string[] = [];
    const retries: Record<string, unknown>[] = [];
    const exhausted: string[] = [];
    const declines: Decline[] = [];
    for (const { attempt, result } of answered) {
      if (attempt.chargeId && !pending.has(attempt.chargeId)) continue; // settled by a worker that took the claim over
      const invoice = invoices.get(attempt.invoiceId)!;
      if (attempt.chargeId) {
        chargeResults.push({
          id: attempt.chargeId, status: result.status, gateway_charge_id: result.status === 'succeeded' ? result.chargeId : null,
          decline_reason: result.status === 'declined' ? result.reason : null,
        });
      }
      if (invoice.status !== 'open') {
        // Voided meanwhile (the subscription was canceled): give the money back.
        if (result.status === 'succeeded') await app.paymentGateway.refund({ chargeId: result.chargeId, idempotencyKey: `refund:${result.chargeId}`, reason: 'invoice voided' });
        continue;
      }
      const attemptCount = invoice.attempt_count + 1;
      if (result.status === 'succeeded') {
        paid.push(invoice.id);
        continue;
      }
      const retry = RETRY_DELAYS_MS[attemptCount - 1];
      const nextAttempt = retry === undefined ? null : new Date(now.getTime() + retry);
      if (nextAttempt) retries.push({ id: invoice.id, next_attempt_at: nextAttempt });
      else exhausted.push(invoice.id);
      const amount = `${toMajor(Number(invoice.amount_due_minor), invoice.currency)} ${invoice.currency}`;
      declines.push({
        invoiceId: invoice.id, subscriptionId: invoice.subscription_id, userId: attempt.userId, last: nextAttempt === null,
        notice: {
          type: 'payment_failed', priority: 'high',
          title: nextAttempt ? 'Your payment failed' : 'Your subscription was canceled',
          body: nextAttempt
            ? `We could not collect ${amount} for invoice ${invoice.invoice_number} (${result.message}). We will try again on ${nextAttempt.toISOString().slice(0, 10)}; you can update your payment method meanwhile.`
            : `We could not collect ${amount} for invoice ${invoice.invoice_number} after several attempts, so the subscription has ended.`,
        },
      });
    }
    if (chargeResults.length) {
      await em.execute(`update billing_invoice_charge c set status = x.status, settled_at = ?, gateway_charge_id = x.gateway_charge_id, decline_reason = x.decline_reason
        from ${recordset(chargeResultColumns)} where c.id = x.id`, [now, JSON.stringify(chargeResults)]);
    }
    if (paid.length) {
      // The method that paid it (a retry may charge another than the renewal was invoiced to).
      await em.execute(`update billing_invoice i set status = 'paid', amount_paid_minor = amount_due_minor, paid_at = ?, next_attempt_at = null,
        attempt_count = attempt_count + 1, updated_at = ?, version = version + 1,
        payment_method_id = coalesce((select c.payment_method_id from billing_invoice_charge c where c.invoice_id = i.id and c.status = 'succeeded' limit 1), i.payment_method_id)
        where id = any(${idList})`, [now, now, ids(paid)]);
      await recordRenewals(app, tx, await renewFromInvoices(em, paid, now));
    }
    if (retries.length) {
      await em.execute(`update billing_invoice i set attempt_count = i.attempt_count + 1, next_attempt_at = x.next_attempt_at, updated_at = ?, version = i.version + 1
        from ${recordset({ id: 'uuid', next_attempt_at: 'timestamptz' })} where i.id = x.id`, [now, JSON.stringify(retries)]);
    }
    if (exhausted.length) {
      await em.execute(`update billing_invoice set status = 'uncollectible', attempt_count = attempt_count + 1, next_attempt_at = null, updated_at = ?, version = version + 1
        where id = any(${idList})`, [now, ids(exhausted)]);
    }
    if (declines.length) await settleDeclines(app, tx, declines);
    await em.flush();
    summary.paid += paid.length;
    summary.declined += retries.length + exhausted.length;
    summary.uncollectible += exhausted.length;
  });
}

/**
 * Charges the given open invoices now if they are due (a payment method the
 * subscriptions are billed to was just attached or chosen: decision "Payment
 * methods of subscriptions"), exactly as the billing clock's retries do: an
 * attempt that counts, a success recovers the subscription, a decline takes
 * the next step of the retry schedule. Call it after the change committed.
 */
export async function retryInvoicesNow(app: BillingServices, rc: RequestContext, invoiceIds: readonly string[]): Promise<ClockSummary> {
  const summary: ClockSummary = { resumed: 0, canceled: 0, expired: 0, invoiced: 0, paid: 0, declined: 0, uncollectible: 0 };
  // The system charges and settles (its transitions and notices are the clock's), under the request's id for tracing.
  if (invoiceIds.length) await chargeDueInvoices(app, { ...withFreshUnitOfWork(rc), actor: null, access: null }, app.clock.now(), summary, invoiceIds);
  app.billingMetrics?.clock(summary);
  return summary;
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
    app.billingMetrics?.clock(summary);
    if (Object.values(summary).some((n) => n > 0)) rc.log.info(summary, 'billing clock');
  },
});
