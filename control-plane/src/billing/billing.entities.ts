// The billing model of document 1 §2: plans and subscriptions. Money is kept
// in integer minor units of the currency (ISO 4217 exponent: JPY 0, EUR 2,
// KWD 3) and shown as JSON numbers only at the API edge. A subscription keeps
// the terms it was sold with (price, cycle, limits), so a plan change reaches
// existing subscribers only at their next renewal (grandfathering).
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';

export const PLAN_TYPES = ['svod', 'live', 'addon', 'ppv'] as const;
export type PlanType = (typeof PLAN_TYPES)[number];
export const BILLING_CYCLES = ['monthly', 'quarterly', 'semi_annual', 'annual'] as const;
export type BillingCycle = (typeof BILLING_CYCLES)[number];
export const QUALITIES = ['SD', 'HD', 'FHD', 'UHD_4K', 'UHD_8K'] as const;
export const SUBSCRIPTION_STATUSES = ['trialing', 'active', 'past_due', 'canceled', 'paused', 'expired'] as const;
export type SubscriptionStatus = (typeof SUBSCRIPTION_STATUSES)[number];
/** Statuses in which a subscription holds its type's one slot (at most one per user and type). */
export const LIVE_SUBSCRIPTION_STATUSES = ['trialing', 'active', 'past_due', 'paused'] as const satisfies readonly SubscriptionStatus[];

/** The terms a subscription is sold with (copied from the plan at sale and at each renewal). */
const terms = {
  price_minor: p.bigint('number'),
  currency: p.string().length(3),
  billing_cycle: p.enum(BILLING_CYCLES),
  max_profiles: p.smallint(),
  max_concurrent_streams: p.smallint(),
  max_devices: p.smallint(),
};

export const PlanSchema = defineEntity({
  name: 'Plan',
  tableName: 'billing_plan',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    name: p.string().length(100),
    type: p.enum(PLAN_TYPES),
    description: p.string().length(500).nullable(),
    ...terms,
    max_quality: p.enum(QUALITIES),
    has_downloads: p.boolean(),
    allow_download_count: p.integer().nullable(),
    has_ads: p.boolean(),
    has_hdr: p.boolean().default(false),
    has_dolby_atmos: p.boolean().default(false),
    trial_days: p.integer().default(0),
    is_active: p.boolean(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [{ name: 'billing_plan_created_at_idx', properties: ['created_at', 'id'] }],
});
export class Plan extends PlanSchema.class {}
PlanSchema.setClass(Plan);

export const SubscriptionSchema = defineEntity({
  name: 'Subscription',
  tableName: 'billing_subscription',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    plan: () => p.manyToOne(Plan).deleteRule('restrict'),
    type: p.enum(PLAN_TYPES),
    status: p.enum(SUBSCRIPTION_STATUSES),
    ...terms,
    /** As sold, like the other max_* terms; null (a row written before it was kept) reads as the plan's. */
    max_quality: p.enum(QUALITIES).nullable(),
    auto_renew: p.boolean().default(true),
    current_period_start: p.datetime(),
    current_period_end: p.datetime(),
    next_billing_date: p.datetime().nullable(),
    cancel_at_period_end: p.boolean().default(false),
    /** When the cancellation was asked for (Stripe's meaning): now for an immediate one, the request's time for one at the period end. */
    canceled_at: p.datetime().nullable(),
    /** When the subscription stopped (canceled or expired); null while it runs. */
    ended_at: p.datetime().nullable(),
    paused_at: p.datetime().nullable(),
    resume_at: p.datetime().nullable(),
    trial_start: p.datetime().nullable(),
    trial_end: p.datetime().nullable(),
    payment_method_id: p.uuid().nullable(),
    /** true: billed to payment_method_id whatever the account's default; false: follows the default (or none: complimentary). */
    payment_method_chosen: p.boolean().default(false),
    coupon_id: p.uuid().nullable(),
    /**
     * What was actually paid for the rest of the current period (net of discounts; prepaid_tax_minor is the tax paid on it),
     * spread evenly from prepaid_from to current_period_end: a plan change credits the unused share of it, never the list price.
     */
    prepaid_minor: p.bigint('number').default(0),
    prepaid_tax_minor: p.bigint('number').default(0),
    prepaid_from: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'billing_subscription_user_idx', properties: ['user', 'created_at'] },
    { name: 'billing_subscription_created_at_idx', properties: ['created_at', 'id'] },
    // What the billing clock looks for: subscriptions whose next charge (trial end, renewal) is due.
    {
      name: 'billing_subscription_due_idx',
      expression: `create index "billing_subscription_due_idx" on "billing_subscription" ("next_billing_date") where status in ('trialing', 'active') and next_billing_date is not null`,
    },
    // Period ends the clock acts on without a charge (cancel at period end, expiry, paused resumption).
    { name: 'billing_subscription_period_end_idx', properties: ['status', 'current_period_end'] },
    // At most one live subscription per user and type, held by the database so concurrent creates cannot both win.
    {
      name: 'billing_subscription_one_live_per_type',
      expression: `create unique index "billing_subscription_one_live_per_type" on "billing_subscription" ("user_id", "type") where status in ('trialing', 'active', 'past_due', 'paused')`,
    },
  ],
  checks: [{ name: 'billing_subscription_prepaid_check', expression: 'prepaid_minor >= 0 and prepaid_tax_minor >= 0' }],
});
export class Subscription extends SubscriptionSchema.class {}
SubscriptionSchema.setClass(Subscription);
