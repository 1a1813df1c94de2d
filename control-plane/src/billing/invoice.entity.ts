// Invoices (document 1 §2 "Invoice") and what the billing engine keeps around
// them: the charge attempts made for each invoice (gateway charge id, the
// idempotency key derived from the invoice and attempt number, result), the
// per-year counter that gives finalized invoices gapless numbers, and the
// per-country tax rates. Money in integer minor units of the invoice currency.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';
import { Plan, Subscription } from './billing.entities.ts';

/** draft → open (numbered) → paid | uncollectible | void. */
export const INVOICE_STATUSES = ['draft', 'open', 'paid', 'uncollectible', 'void'] as const;
export type InvoiceStatus = (typeof INVOICE_STATUSES)[number];

/** Why an invoice was issued: the first period, a renewal (or trial conversion), a plan change mid-period. */
export const BILLING_REASONS = ['subscription_create', 'subscription_cycle', 'subscription_update'] as const;
export type BillingReason = (typeof BILLING_REASONS)[number];

/** subscription: a period at the plan's price; proration: the credit (negative) or the charge of a plan change mid-period. Discount and tax are amounts of the invoice, not lines. */
export const LINE_ITEM_TYPES = ['subscription', 'proration'] as const;
export type LineItemType = (typeof LINE_ITEM_TYPES)[number];

export interface LineItem {
  description: string;
  quantity: number;
  /** Minor units; negative for a proration credit. */
  unit_price_minor: number;
  amount_minor: number;
  type: LineItemType;
}

export const InvoiceSchema = defineEntity({
  name: 'Invoice',
  tableName: 'billing_invoice',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    subscription: () => p.manyToOne(Subscription).deleteRule('restrict'),
    /** The plan the invoiced period is sold on (a renewal applies its terms when paid). */
    plan: () => p.manyToOne(Plan).deleteRule('restrict'),
    /** `INV-<year>-<6 digits>`, given when the invoice is finalized (null while draft). */
    invoice_number: p.string().length(32).nullable(),
    status: p.enum(INVOICE_STATUSES),
    billing_reason: p.enum(BILLING_REASONS),
    currency: p.string().length(3),
    /** Sum of the line items, signed (a downgrade's credit line can make it negative), before discount and tax. */
    amount_minor: p.bigint('number'),
    /** Taken off the charges (positive lines) by a coupon, or all of them for a complimentary invoice. */
    discount_minor: p.bigint('number'),
    /** Tax on the charges less the tax paid on credited time: negative when more tax comes back than is charged. */
    tax_minor: p.bigint('number'),
    /** The rate applied (basis points) and the country it came from; null: no tax. */
    tax_rate_bp: p.integer().nullable(),
    tax_country: p.string().length(2).nullable(),
    /** Paid from the account balance in the invoice currency, before the card. */
    balance_applied_minor: p.bigint('number'),
    /** A negative total (amount − discount + tax below 0: a downgrade) given back to the account balance. */
    balance_credit_minor: p.bigint('number').default(0),
    /** What the payment method is charged: amount − discount + tax − balance applied + balance credit (never negative). */
    amount_due_minor: p.bigint('number'),
    amount_paid_minor: p.bigint('number'),
    description: p.string().length(500),
    line_items: p.json<LineItem[]>(),
    coupon_id: p.uuid().nullable(),
    /** The method charged (null: complimentary or paid without a charge). */
    payment_method_id: p.uuid().nullable(),
    period_start: p.datetime(),
    period_end: p.datetime(),
    due_date: p.datetime(),
    paid_at: p.datetime().nullable(),
    /** Charge attempts made so far, and when the next is due (null: none pending). */
    attempt_count: p.integer().default(0),
    next_attempt_at: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'billing_invoice_user_idx', properties: ['user', 'created_at'] },
    { name: 'billing_invoice_subscription_idx', properties: ['subscription', 'created_at'] },
    {
      name: 'billing_invoice_due_attempt_idx',
      expression: `create index "billing_invoice_due_attempt_idx" on "billing_invoice" ("next_attempt_at") where status = 'open' and next_attempt_at is not null`,
    },
    // One period invoice per subscription and period start: a renewal can never be invoiced twice.
    {
      name: 'billing_invoice_one_per_period',
      expression: `create unique index "billing_invoice_one_per_period" on "billing_invoice" ("subscription_id", "period_start") where billing_reason <> 'subscription_update' and status <> 'void'`,
    },
  ],
  uniques: [{ name: 'billing_invoice_number_key', properties: ['invoice_number'] }],
  checks: [
    {
      name: 'billing_invoice_amounts_check',
      expression: 'discount_minor >= 0 and balance_applied_minor >= 0 and balance_credit_minor >= 0 and amount_due_minor >= 0 and amount_paid_minor >= 0 '
        + 'and amount_paid_minor <= amount_due_minor and amount_minor - discount_minor + tax_minor - balance_applied_minor + balance_credit_minor = amount_due_minor',
    },
    { name: 'billing_invoice_number_check', expression: `(status = 'draft') = (invoice_number is null)` },
  ],
});
export class Invoice extends InvoiceSchema.class {}
InvoiceSchema.setClass(Invoice);

export const CHARGE_STATUSES = ['pending', 'succeeded', 'declined'] as const;
export type ChargeStatus = (typeof CHARGE_STATUSES)[number];

/**
 * One attempt to charge an invoice. Recorded `pending` (and committed) before
 * the gateway is called, with the idempotency key `<invoice id>:<attempt>`;
 * a rerun after a crash finds the pending attempt and charges with the same
 * key, so the gateway charges once.
 */
export const InvoiceChargeSchema = defineEntity({
  name: 'InvoiceCharge',
  tableName: 'billing_invoice_charge',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    invoice: () => p.manyToOne(Invoice).deleteRule('cascade'),
    attempt: p.integer(),
    idempotency_key: p.string().length(100),
    status: p.enum(CHARGE_STATUSES),
    amount_minor: p.bigint('number'),
    currency: p.string().length(3),
    payment_method_id: p.uuid(),
    gateway_charge_id: p.string().length(255).nullable(),
    decline_reason: p.string().length(64).nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    settled_at: p.datetime().nullable(),
  },
  uniques: [
    { name: 'billing_invoice_charge_key', properties: ['idempotency_key'] },
    { name: 'billing_invoice_charge_attempt_key', properties: ['invoice', 'attempt'] },
  ],
});
export class InvoiceCharge extends InvoiceChargeSchema.class {}
InvoiceChargeSchema.setClass(InvoiceCharge);

/** The last invoice number given in a year; bumped in the transaction that finalizes an invoice, so a rollback leaves no gap. */
export const InvoiceCounterSchema = defineEntity({
  name: 'InvoiceCounter',
  tableName: 'billing_invoice_counter',
  properties: {
    year: p.integer().primary().autoincrement(false),
    last_number: p.integer(),
  },
});
export class InvoiceCounter extends InvoiceCounterSchema.class {}
InvoiceCounterSchema.setClass(InvoiceCounter);

/** Tax rate per billing country (basis points, exclusive: added on top). No row: no tax. Seeded empty. */
export const TaxRateSchema = defineEntity({
  name: 'TaxRate',
  tableName: 'billing_tax_rate',
  properties: {
    country: p.string().length(2).primary(),
    rate_bp: p.integer(),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  checks: [{ name: 'billing_tax_rate_check', expression: 'rate_bp >= 0 and rate_bp <= 10000' }],
});
export class TaxRate extends TaxRateSchema.class {}
TaxRateSchema.setClass(TaxRate);
