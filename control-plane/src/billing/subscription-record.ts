// The Subscription, Subscription preview and Invoice records of document 1 §2.
// Each record is the presenter: a route hands over the entity with the few
// computed fields (the embedded plan, the method's last four digits, amounts
// in major units), and the router parses it through the record.
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { orNull, timestamp, timestampOrNull } from '../http/schemas.ts';
import { PLAN_TYPES, SUBSCRIPTION_STATUSES, type Subscription } from './billing.entities.ts';
import { BILLING_REASONS, INVOICE_STATUSES, LINE_ITEM_TYPES, type Invoice } from './invoice.entity.ts';
import { amountRecord } from './money-fields.ts';
import { toMajor } from './money.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import { planRecord, presentPlan } from './plan-record.ts';
import type { Proration } from './subscription-service.ts';

export const subscriptionRecord = z.object({
  id: z.uuid(),
  user_id: z.uuid(),
  plan_id: z.uuid(),
  type: z.enum(PLAN_TYPES),
  plan: planRecord.describe('The plan with the terms this subscription has: price, currency, billing_cycle and the max_* limits as it was sold them '
    + '(a plan\'s new terms reach it at its next renewal, document 1 §2); the other fields (name, description, features) as the plan is now'),
  status: z.enum(SUBSCRIPTION_STATUSES),
  auto_renew: z.boolean(),
  current_period_start: timestamp(),
  current_period_end: timestamp(),
  next_billing_date: timestampOrNull().describe('When the billing clock next charges it; null when it will not renew'),
  cancel_at_period_end: z.boolean(),
  canceled_at: timestampOrNull().describe('When the cancellation was asked for (as Stripe\'s): now for an immediate one, the request\'s time for one at the period end (kept when it takes effect); null when never canceled'),
  ended_at: timestampOrNull().describe('When the subscription stopped: canceled (now, or at its period end) or expired; null while it runs'),
  paused_at: timestampOrNull(),
  resume_at: timestampOrNull().describe('When a paused subscription resumes by itself; null: paused until resumed'),
  trial_start: timestampOrNull(),
  trial_end: timestampOrNull(),
  payment_method_id: orNull(z.uuid()).describe('The method the subscription is billed to; null: complimentary (assigned by an administrator without a payment method)'),
  payment_method_chosen: z.boolean().describe('true: billed to payment_method_id whatever the account\'s default (chosen for it); false: follows the account\'s default payment method'),
  payment_method_last4: orNull(z.string()),
  coupon_id: orNull(z.uuid()),
  price: amountRecord().describe('The price per cycle this subscription is billed (as sold; a plan\'s new price applies from the next renewal)'),
  currency: z.string(),
  billing_cycle: z.string(),
  created_at: timestamp(),
  updated_at: timestamp(),
});

export const subscriptionResource = versioned(subscriptionRecord);

type Presented = Subscription & { user_id: string; plan_id: string; plan: ReturnType<typeof presentPlan>; payment_method_last4: string | null; price: number };

/** Subscriptions as the API shows them (their plans populated), with their payment methods' last four digits read in one query. */
export async function presentSubscriptions(em: EntityManager, subscriptions: Subscription[]): Promise<Presented[]> {
  const ids = [...new Set(subscriptions.map((s) => s.payment_method_id).filter((id): id is string => Boolean(id)))];
  const methods = ids.length ? await em.find(PaymentMethod, { id: { $in: ids } }) : [];
  const last4 = new Map(methods.map((m) => [m.id, m.last4 ?? null]));
  return subscriptions.map((s) => ({
    ...s,
    user_id: s.user.id,
    plan_id: s.plan.id,
    plan: planAsSold(s),
    payment_method_last4: s.payment_method_id ? last4.get(s.payment_method_id) ?? null : null,
    price: toMajor(s.price_minor, s.currency),
  }));
}

/**
 * The embedded plan with the subscription's own terms (grandfathered until
 * its next renewal): a subscriber must see the price and limits they have,
 * not those a changed plan sells to new subscribers.
 */
function planAsSold(s: Subscription): ReturnType<typeof presentPlan> {
  return {
    ...presentPlan(s.plan), price: toMajor(s.price_minor, s.currency), price_minor: s.price_minor, currency: s.currency, billing_cycle: s.billing_cycle,
    max_profiles: s.max_profiles, max_concurrent_streams: s.max_concurrent_streams, max_devices: s.max_devices, max_quality: s.max_quality ?? s.plan.max_quality,
  };
}

export async function presentSubscription(em: EntityManager, subscription: Subscription): Promise<Presented> {
  return (await presentSubscriptions(em, [subscription]))[0]!;
}

export const previewRecord = z.object({
  from_plan_id: z.uuid(),
  to_plan_id: z.uuid(),
  proration_credit: amountRecord().describe('What was paid for the unused time of the current period (net of discounts), its share still ahead: the credit line'),
  proration_charge: amountRecord().describe('The same time on the new plan at its price: the charge line'),
  discount_amount: amountRecord().describe('What `coupon_code` takes off the charge'),
  tax_amount: amountRecord().describe('Tax on the charge less the discount, minus the tax paid on the credited time (negative when more comes back)'),
  total: amountRecord().describe('charge − credit − discount + tax; below 0 it goes to the account balance'),
  balance_applied: amountRecord().describe('Paid from the account balance in the currency before the card'),
  amount_due_now: amountRecord().describe('What the payment method is charged now: max(0, total) − balance applied; the change\'s invoice shows the same amount_due'),
  balance_credit: amountRecord().describe('A negative total, added to the account balance in the currency'),
  currency: z.string(),
  next_billing_date: timestampOrNull(),
  effective: z.enum(['immediate']),
});

export function presentPreview(subscription: Subscription, p: Proration) {
  const major = (minor: number) => signedMajor(minor, p.currency);
  const totals = p.quote.totals;
  return {
    from_plan_id: p.fromPlan.id, to_plan_id: p.toPlan.id, proration_credit: major(p.creditMinor), proration_charge: major(p.chargeMinor),
    discount_amount: major(totals.discount), tax_amount: major(totals.tax), total: major(totals.total), balance_applied: major(totals.balanceApplied),
    amount_due_now: major(totals.amountDue), balance_credit: major(totals.balanceCredit), currency: p.currency,
    next_billing_date: subscription.next_billing_date ?? null, effective: 'immediate' as const,
  };
}

/** Signed minor units as the JSON number the API shows (−400 EUR cents → −4). */
const signedMajor = (minor: number, currency: string) => toMajor(Math.abs(minor), currency) * Math.sign(minor || 1);

export const invoiceRecord = z.object({
  id: z.uuid(),
  invoice_number: orNull(z.string()).describe('INV-<year>-<6 digits>, sequential without gaps per year; null while draft'),
  subscription_id: z.uuid(),
  status: z.enum(INVOICE_STATUSES),
  billing_reason: z.enum(BILLING_REASONS),
  amount: amountRecord().describe('Sum of the line items, signed: a plan change\'s credit line can make it negative'),
  discount_amount: amountRecord().describe('Taken off the charges (the positive lines) by a coupon, or all of them when complimentary'),
  tax_amount: amountRecord().describe('Exclusive tax on the charges less the discount, at the rate of the payment method\'s billing country, minus the tax paid on credited time (negative when more comes back)'),
  total: amountRecord().describe('amount − discount + tax, signed; below 0 it goes to the account balance (balance_credit)'),
  balance_applied: amountRecord().describe('Paid from the account balance before the card'),
  balance_credit: amountRecord().describe('A negative total given back to the account balance in the currency'),
  amount_due: amountRecord().describe('max(0, total) − balance applied: what the payment method is charged'),
  amount_paid: amountRecord(),
  currency: z.string(),
  description: z.string(),
  period_start: timestamp(),
  period_end: timestamp(),
  due_date: timestamp(),
  paid_at: timestampOrNull(),
  created_at: timestamp(),
  line_items: z.array(z.object({
    description: z.string(), quantity: z.number().int(), unit_price: amountRecord(), amount: amountRecord(), type: z.enum(LINE_ITEM_TYPES),
  })),
});

export function presentInvoice(invoice: Invoice) {
  const major = (minor: number) => signedMajor(minor, invoice.currency);
  return {
    ...invoice,
    subscription_id: invoice.subscription.id,
    amount: major(invoice.amount_minor),
    discount_amount: major(invoice.discount_minor),
    tax_amount: major(invoice.tax_minor),
    total: major(invoice.amount_minor - invoice.discount_minor + invoice.tax_minor),
    balance_applied: major(invoice.balance_applied_minor),
    balance_credit: major(invoice.balance_credit_minor),
    amount_due: major(invoice.amount_due_minor),
    amount_paid: major(invoice.amount_paid_minor),
    line_items: invoice.line_items.map((l) => ({
      description: l.description, quantity: l.quantity, unit_price: major(l.unit_price_minor), amount: major(l.amount_minor), type: l.type,
    })),
  };
}
