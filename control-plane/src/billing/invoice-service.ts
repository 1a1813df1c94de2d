// Invoices: how one is built (lines, coupon discount, tax, account balance),
// numbered and charged. Two ways of paying:
// - at once, inside the caller's transaction (subscription create, plan
//   change, reactivation): the invoice stays a draft while the card is
//   charged; a decline throws and the whole transaction — subscription,
//   coupon redemption, balance debit — rolls back; on success the invoice is
//   numbered and paid in the same transaction (payNow);
// - by the billing clock (renewals, trial conversions, retries): the invoice
//   is committed open and numbered first, then each attempt is recorded
//   pending and committed before the gateway is called with the key
//   `<invoice id>:<attempt>`, so a rerun after a crash charges with the same
//   key and the gateway charges once (billing-clock.ts).
// Numbers are `INV-<year>-<000001>` from a per-year counter row bumped in the
// transaction that finalizes the invoice: a rollback leaves no gap.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { RequestContext } from '../core/request-context.ts';
import { idList, ids } from '../db/bulk.ts';
import { ApiError } from '../http/errors.ts';
import { balanceOf, creditBalance, debitBalance } from './balance-service.ts';
import type { Plan, Subscription } from './billing.entities.ts';
import { couponDiscount } from './coupon-service.ts';
import type { Coupon } from './coupon.entity.ts';
import type { ChargeResult, DeclineReason } from './gateway/payment-gateway.ts';
import { Invoice, InvoiceCharge, TaxRate, type BillingReason, type LineItem } from './invoice.entity.ts';
import { percentOf, sumMinor } from './money.ts';
import type { PaymentMethod } from './payment-method.entity.ts';
import type { BillingServices } from './services.ts';

/** How long a manual (charge-free) invoice may stay open: its due date after issue. */
export const INVOICE_DUE_DAYS = 0;

export interface InvoiceDraft {
  userId: string;
  subscription: Subscription;
  plan: Plan;
  reason: BillingReason;
  currency: string;
  /** Signed: a period or the remaining time on a plan (positive), the unused time of the plan left (negative). */
  lines: LineItem[];
  /** The tax paid on the time a negative line credits (it comes back with it). */
  creditTaxMinor?: number;
  /** Discount on the charges (the positive lines): the first invoice, a plan change's remaining time. */
  coupon?: Coupon | null;
  /** Complimentary: the whole amount is discounted and nothing is charged. */
  complimentary?: boolean;
  paymentMethod: PaymentMethod | null;
  periodStart: Date;
  periodEnd: Date;
  description: string;
  /** A fixed id (derived from the request's Idempotency-Key, so a retried request charges with the same key). */
  id?: string;
}

/** The tax rate of a billing country (basis points), null when it has none. */
export async function taxRateOf(em: EntityManager, country: string | null | undefined): Promise<number | null> {
  if (!country) return null;
  const rate = await em.findOne(TaxRate, { country: country.toUpperCase() });
  return rate && rate.rate_bp > 0 ? rate.rate_bp : null;
}

export interface InvoiceTotals {
  /** Sum of the lines, signed. */
  amount: number;
  /** The positive lines: what is bought. */
  charges: number;
  discount: number;
  /** Tax on the charges less the discount, minus the tax paid on the credited time (signed). */
  tax: number;
  /** amount − discount + tax, signed: below 0 the invoice gives money back. */
  total: number;
  /** Taken from the account balance before the payment method (never above a positive total). */
  balanceApplied: number;
  /** A negative total, given back to the account balance. */
  balanceCredit: number;
  /** What the payment method is charged: max(0, total) − balance applied. */
  amountDue: number;
  /** What the charges cost once paid (net of the discount) and the tax on that: the value the covered time is then prepaid with. */
  prepaid: { net: number; tax: number };
}

/**
 * The one pricing of an invoice, from its lines (every invoice and every
 * preview goes through it): the coupon (or a complimentary invoice) discounts
 * the charges, exclusive tax is added on what is left of them, the tax paid on
 * credited time comes back, the balance pays what it can of a positive total
 * and a negative total goes to the balance. The totals add up:
 * amount − discount + tax − balanceApplied + balanceCredit = amountDue.
 */
export function invoiceTotals(lines: readonly LineItem[], options: {
  coupon?: Coupon | null; complimentary?: boolean; currency: string; taxRateBp: number | null; creditTaxMinor?: number; balanceMinor?: number;
}): InvoiceTotals {
  const charges = sumMinor(lines.filter((l) => l.amount_minor > 0).map((l) => l.amount_minor));
  const credits = sumMinor(lines.filter((l) => l.amount_minor < 0).map((l) => -l.amount_minor));
  const discount = options.complimentary ? charges : options.coupon ? couponDiscount(options.coupon, charges, options.currency) : 0;
  const net = charges - discount;
  const chargeTax = options.taxRateBp ? percentOf(net, options.taxRateBp) : 0;
  const tax = chargeTax - (options.creditTaxMinor ?? 0);
  const amount = charges - credits;
  const total = amount - discount + tax;
  const balanceApplied = Math.min(Math.max(0, options.balanceMinor ?? 0), Math.max(0, total));
  return {
    amount, charges, discount, tax, total, balanceApplied, balanceCredit: Math.max(0, -total),
    amountDue: Math.max(0, total) - balanceApplied, prepaid: { net, tax: chargeTax },
  };
}

/** The user's balance in `currency`, its row locked until the caller's transaction ends (0 when none). */
async function lockedBalance(em: EntityManager, userId: string, currency: string): Promise<number> {
  const [row] = await em.execute<{ balance_minor: string }[]>(
    'select balance_minor from billing_account_balance where user_id = ? and currency = ? for update', [userId, currency]);
  return row ? Number(row.balance_minor) : 0;
}

export interface InvoiceQuote {
  taxRateBp: number | null;
  taxCountry: string | null;
  totals: InvoiceTotals;
}

/**
 * What an invoice for `draft` comes to now, the account balance included:
 * the preview of a plan change calls it as the change does (with `lock`, the
 * balance row is held for the caller's transaction, which then debits exactly
 * what was quoted).
 */
export async function quoteInvoice(em: EntityManager, draft: Pick<InvoiceDraft, 'userId' | 'currency' | 'lines' | 'creditTaxMinor' | 'coupon' | 'complimentary' | 'paymentMethod'>, options: { lock: boolean }): Promise<InvoiceQuote> {
  const taxRateBp = draft.complimentary ? null : await taxRateOf(em, draft.paymentMethod?.billing_country);
  const balanceMinor = options.lock ? await lockedBalance(em, draft.userId, draft.currency) : await balanceOf(em, draft.userId, draft.currency);
  const totals = invoiceTotals(draft.lines, {
    coupon: draft.coupon, complimentary: draft.complimentary, currency: draft.currency, taxRateBp, creditTaxMinor: draft.creditTaxMinor, balanceMinor,
  });
  return { taxRateBp, taxCountry: taxRateBp ? draft.paymentMethod!.billing_country!.toUpperCase() : null, totals };
}

/**
 * Builds a draft invoice in the caller's unit of work (not yet flushed,
 * numbered or paid), priced by quoteInvoice with the balance locked (or at
 * `quoted`, a quote the caller took with the lock); with its totals.
 */
export async function draftInvoice(rc: RequestContext, draft: InvoiceDraft, now: Date, quoted?: InvoiceQuote): Promise<{ invoice: Invoice; totals: InvoiceTotals }> {
  const { taxRateBp, taxCountry, totals } = quoted ?? await quoteInvoice(rc.em, draft, { lock: true });
  const invoice = rc.em.create(Invoice, {
    ...(draft.id ? { id: draft.id } : {}),
    user: draft.userId,
    subscription: draft.subscription,
    plan: draft.plan,
    invoice_number: null,
    status: 'draft',
    billing_reason: draft.reason,
    currency: draft.currency,
    amount_minor: totals.amount,
    discount_minor: totals.discount,
    tax_minor: totals.tax,
    tax_rate_bp: taxRateBp,
    tax_country: taxCountry,
    balance_applied_minor: totals.balanceApplied,
    balance_credit_minor: totals.balanceCredit,
    amount_due_minor: totals.amountDue,
    amount_paid_minor: 0,
    description: draft.description,
    line_items: draft.lines,
    coupon_id: draft.coupon?.id ?? null,
    payment_method_id: draft.paymentMethod?.id ?? null,
    period_start: draft.periodStart,
    period_end: draft.periodEnd,
    due_date: now,
    paid_at: null,
    attempt_count: 0,
    next_attempt_at: null,
    created_at: now,
    updated_at: now,
  } as never);
  return { invoice, totals };
}

/**
 * Moves the balance an invoice was quoted with (in the caller's transaction,
 * whose lock on the balance row the quote took): debits what it applies,
 * credits what a negative total gives back.
 */
async function settleBalance(rc: RequestContext, invoice: Invoice): Promise<void> {
  const movement = { userId: invoice.user.id, currency: invoice.currency, source: 'invoice' as const, referenceId: invoice.id };
  if (invoice.balance_applied_minor > 0) {
    const applied = await debitBalance(rc, { ...movement, maxMinor: invoice.balance_applied_minor });
    if (applied !== invoice.balance_applied_minor) throw new Error(`invoice ${invoice.id}: balance applied ${applied}, quoted ${invoice.balance_applied_minor}`);
  }
  if (invoice.balance_credit_minor > 0) await creditBalance(rc, { ...movement, amountMinor: invoice.balance_credit_minor });
}

/**
 * Voids the open invoices of the subscriptions (they end: nothing more is
 * charged for them). What the balance had paid of one goes back to the
 * balance, as a void undoes the whole invoice; a card charge answered later
 * for a voided invoice is refunded by the billing clock's settle.
 */
export async function voidOpenInvoices(rc: RequestContext, subscriptionIds: readonly string[], now: Date): Promise<void> {
  if (!subscriptionIds.length) return;
  const voided = await rc.em.execute<{ id: string; user_id: string; currency: string; balance_applied_minor: string }[]>(
    `update billing_invoice set status = 'void', next_attempt_at = null, updated_at = ?, version = version + 1
     where subscription_id = any(${idList}) and status = 'open' returning id, user_id, currency, balance_applied_minor`, [now, ids(subscriptionIds)]);
  for (const invoice of voided) {
    const amountMinor = Number(invoice.balance_applied_minor);
    if (amountMinor > 0) await creditBalance(rc, { userId: invoice.user_id, currency: invoice.currency, amountMinor, source: 'invoice', referenceId: invoice.id });
  }
}

/** Formats an invoice number. */
export const invoiceNumber = (year: number, n: number) => `INV-${year}-${String(n).padStart(6, '0')}`;

/**
 * Takes the next `count` numbers of the year (the counter row is locked until
 * the caller's transaction ends, so numbers are given in commit order and a
 * rollback returns them). Returns the first.
 */
export async function takeInvoiceNumbers(em: EntityManager, year: number, count: number): Promise<number> {
  const [row] = await em.execute<{ last_number: number }[]>(
    `insert into billing_invoice_counter (year, last_number) values (?, ?)
     on conflict (year) do update set last_number = billing_invoice_counter.last_number + excluded.last_number
     returning last_number`, [year, count]);
  return Number(row!.last_number) - count + 1;
}

/** draft → open with the year's next number. In the caller's transaction, as late in it as possible (the counter row stays locked until commit). */
export async function finalizeInvoice(rc: RequestContext, invoice: Invoice, now: Date): Promise<void> {
  await rc.em.flush();
  const year = now.getUTCFullYear();
  invoice.invoice_number = invoiceNumber(year, await takeInvoiceNumbers(rc.em, year, 1));
  invoice.status = 'open';
}

/** Marks an invoice paid (amount due settled by `paidMinor`). */
export function markPaid(invoice: Invoice, now: Date): void {
  invoice.status = 'paid';
  invoice.amount_paid_minor = invoice.amount_due_minor;
  invoice.paid_at = now;
  invoice.next_attempt_at = null;
}

/** The idempotency key of an invoice's nth charge attempt (the gateway charges once per key). */
export const chargeKey = (invoiceId: string, attempt: number) => `invoice:${invoiceId}:${attempt}`;

/** A declined charge as the 402 an operation answers. */
export function paymentFailed(reason: DeclineReason, message: string): ApiError {
  return new ApiError('PAYMENT_FAILED', `The payment was declined: ${message}`, { details: { decline_code: reason } });
}

/**
 * Pays a draft invoice now, inside the caller's transaction: the balance
 * moves as quoted (debited first, or credited with a negative total), then
 * the card is charged the rest. A decline throws 402 (the caller's transaction
 * rolls back, so nothing it did is kept). On success the invoice is numbered
 * and paid, and the charge recorded. `onCharged` learns the gateway's charge
 * id so the caller can refund it if its transaction fails to commit.
 */
export async function payNow(app: BillingServices, rc: RequestContext, invoice: Invoice, method: PaymentMethod | null, now: Date, onCharged: (chargeId: string) => void): Promise<void> {
  await settleBalance(rc, invoice);
  if (invoice.amount_due_minor > 0) {
    if (!method) throw new ApiError('CONFLICT', 'Nothing to charge the amount due to: the subscription has no payment method');
    const key = chargeKey(invoice.id, 1);
    const result: ChargeResult = await app.paymentGateway.charge({
      paymentMethodId: method.gateway_payment_method_id, customerRef: invoice.user.id, amountMinor: invoice.amount_due_minor,
      currency: invoice.currency, idempotencyKey: key, description: invoice.description,
    });
    if (result.status !== 'succeeded') throw paymentFailed(result.reason, result.message);
    onCharged(result.chargeId);
    invoice.attempt_count = 1;
    rc.em.create(InvoiceCharge, {
      invoice, attempt: 1, idempotency_key: key, status: 'succeeded', amount_minor: invoice.amount_due_minor, currency: invoice.currency,
      payment_method_id: method.id, gateway_charge_id: result.chargeId, decline_reason: null, created_at: now, settled_at: now,
    } as never);
  }
  await finalizeInvoice(rc, invoice, now);
  markPaid(invoice, now);
  await rc.em.flush();
}

/**
 * Runs `work` (a transaction that may charge a card through payNow) and, if
 * it fails after a charge succeeded (the commit, a constraint), refunds that
 * charge: the caller is told the operation failed, so no money may stay taken.
 */
export async function withChargeCompensation<T>(app: BillingServices, rc: RequestContext, work: (onCharged: (chargeId: string) => void) => Promise<T>): Promise<T> {
  const charged: string[] = [];
  try {
    return await work((id) => charged.push(id));
  } catch (error) {
    for (const chargeId of charged) {
      try {
        await app.paymentGateway.refund({ chargeId, idempotencyKey: `refund:${chargeId}`, reason: 'operation rolled back' });
      } catch (refundError) {
        rc.log.error({ err: refundError, charge_id: chargeId }, 'charge of a rolled-back billing operation not refunded');
      }
    }
    throw error;
  }
}

/** Line of a period at a price. */
export function periodLine(plan: { name: string }, priceMinor: number, start: Date, end: Date): LineItem {
  return {
    description: `${plan.name} (${start.toISOString().slice(0, 10)} – ${end.toISOString().slice(0, 10)})`,
    quantity: 1, unit_price_minor: priceMinor, amount_minor: priceMinor, type: 'subscription',
  };
}
