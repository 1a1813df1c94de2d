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
import { ApiError } from '../http/errors.ts';
import { debitBalance } from './balance-service.ts';
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
  lines: LineItem[];
  /** Discount on a positive subtotal (first invoice, or every invoice while the coupon lasts). */
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

/** The amounts of an invoice from its lines: discount on the positive subtotal, then exclusive tax on what is left. */
export function invoiceAmounts(lines: LineItem[], options: { coupon?: Coupon | null; complimentary?: boolean; currency: string; taxRateBp: number | null }) {
  const positive = sumMinor(lines.filter((l) => l.amount_minor > 0).map((l) => l.amount_minor));
  const credits = sumMinor(lines.filter((l) => l.amount_minor < 0).map((l) => -l.amount_minor));
  const amount = Math.max(0, positive - credits);
  const discount = options.complimentary ? amount : options.coupon ? couponDiscount(options.coupon, amount, options.currency) : 0;
  const taxable = amount - discount;
  const tax = options.taxRateBp ? percentOf(taxable, options.taxRateBp) : 0;
  return { amount, discount, tax, total: taxable + tax, net: positive - credits };
}

/** Builds a draft invoice in the caller's unit of work (not yet flushed, numbered or paid). */
export async function draftInvoice(rc: RequestContext, draft: InvoiceDraft, now: Date): Promise<Invoice> {
  const taxRateBp = draft.complimentary ? null : await taxRateOf(rc.em, draft.paymentMethod?.billing_country);
  const amounts = invoiceAmounts(draft.lines, { coupon: draft.coupon, complimentary: draft.complimentary, currency: draft.currency, taxRateBp });
  return rc.em.create(Invoice, {
    ...(draft.id ? { id: draft.id } : {}),
    user: draft.userId,
    subscription: draft.subscription,
    plan: draft.plan,
    invoice_number: null,
    status: 'draft',
    billing_reason: draft.reason,
    currency: draft.currency,
    amount_minor: amounts.amount,
    discount_minor: amounts.discount,
    tax_minor: amounts.tax,
    tax_rate_bp: taxRateBp,
    tax_country: taxRateBp ? draft.paymentMethod!.billing_country!.toUpperCase() : null,
    balance_applied_minor: 0,
    amount_due_minor: amounts.total,
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
}

/** Pays what it can of the invoice from the user's balance in its currency (before the card). In the caller's transaction. */
export async function applyBalance(rc: RequestContext, invoice: Invoice): Promise<void> {
  if (invoice.amount_due_minor <= 0) return;
  const applied = await debitBalance(rc, {
    userId: invoice.user.id, currency: invoice.currency, maxMinor: invoice.amount_due_minor, source: 'invoice', referenceId: invoice.id,
  });
  invoice.balance_applied_minor += applied;
  invoice.amount_due_minor -= applied;
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
 * Pays a draft invoice now, inside the caller's transaction: balance first,
 * then the card for the rest. A decline throws 402 (the caller's transaction
 * rolls back, so nothing it did is kept). On success the invoice is numbered
 * and paid, and the charge recorded. `onCharged` learns the gateway's charge
 * id so the caller can refund it if its transaction fails to commit.
 */
export async function payNow(app: BillingServices, rc: RequestContext, invoice: Invoice, method: PaymentMethod | null, now: Date, onCharged: (chargeId: string) => void): Promise<void> {
  await applyBalance(rc, invoice);
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
