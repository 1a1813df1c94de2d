// Coupons (document 1 §2 "Coupon") and their redemptions. A coupon takes a
// percentage off (stored in basis points: 12.5 % = 1250) or a fixed amount
// off (minor units of its currency). Its code is kept in canonical upper case,
// so codes are unique and matched whatever case a client types. Whether a
// coupon has expired is not stored: it follows from valid_until and the clock.
// redemption_count counts redemptions ever made; a check keeps it within
// max_redemptions even if code went wrong.
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';
import { Plan, Subscription } from './billing.entities.ts';

export const COUPON_DISCOUNT_TYPES = ['percent', 'amount'] as const;
export type CouponDiscountType = (typeof COUPON_DISCOUNT_TYPES)[number];
/** What is stored; `expired` is computed (coupon-record.ts). */
export const COUPON_STORED_STATUSES = ['active', 'inactive'] as const;
export const COUPON_STATUSES = ['active', 'inactive', 'expired'] as const;
export type CouponStatus = (typeof COUPON_STATUSES)[number];

export const CouponSchema = defineEntity({
  name: 'Coupon',
  tableName: 'billing_coupon',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    /** Canonical upper case (A–Z, 0–9, - and _). */
    code: p.string().length(50),
    description: p.string().length(500).nullable(),
    discount_type: p.enum(COUPON_DISCOUNT_TYPES),
    /** percent: hundredths of a percent off, 1..10000. */
    percent_off_bp: p.integer().nullable(),
    /** amount: minor units of `currency` off. */
    amount_off_minor: p.bigint('number').nullable(),
    /** Required for amount coupons; for percent coupons, limits them to plans priced in it. */
    currency: p.string().length(3).nullable(),
    /** Plans the coupon applies to; empty: every plan. */
    applicable_plan_ids: p.array<string>().columnType('uuid[]').defaultRaw(`'{}'`),
    /** null: no limit. */
    max_redemptions: p.integer().nullable(),
    /** null: no limit. */
    max_redemptions_per_user: p.integer().nullable(),
    redemption_count: p.integer().default(0),
    valid_from: p.datetime(),
    valid_until: p.datetime().nullable(),
    status: p.enum(COUPON_STORED_STATUSES),
    deactivated_at: p.datetime().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [{ name: 'billing_coupon_created_at_idx', properties: ['created_at', 'id'] }],
  uniques: [{ name: 'billing_coupon_code_key', properties: ['code'] }],
  checks: [
    {
      name: 'billing_coupon_discount_check',
      expression: `(discount_type = 'percent' and percent_off_bp >= 1 and percent_off_bp <= 10000 and amount_off_minor is null) `
        + `or (discount_type = 'amount' and amount_off_minor > 0 and currency is not null and percent_off_bp is null)`,
    },
    { name: 'billing_coupon_redemptions_check', expression: 'redemption_count >= 0 and (max_redemptions is null or redemption_count <= max_redemptions)' },
  ],
});
export class Coupon extends CouponSchema.class {}
CouponSchema.setClass(Coupon);

export const CouponRedemptionSchema = defineEntity({
  name: 'CouponRedemption',
  tableName: 'billing_coupon_redemption',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    coupon: () => p.manyToOne(Coupon).deleteRule('restrict'),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    /** The plan it was redeemed for (kept as null once a plan is deleted). */
    plan: () => p.manyToOne(Plan).nullable().deleteRule('set null'),
    /** What the billing engine applied it to, when it says. */
    subscription: () => p.manyToOne(Subscription).nullable().deleteRule('set null'),
    invoice_id: p.uuid().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
  },
  indexes: [{ name: 'billing_coupon_redemption_coupon_user_idx', properties: ['coupon', 'user'] }],
});
export class CouponRedemption extends CouponRedemptionSchema.class {}
CouponRedemptionSchema.setClass(CouponRedemption);
