// The Coupon record of document 1 §2, its create body, and the bare answer of
// "validate coupon" (§4.5). The record is the presenter: a route hands over
// the coupon with its discount as a JSON number and its status by the clock.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { dateTime, orNull, timestamp, timestampOrNull, uuid, withExample } from '../http/schemas.ts';
import { COUPON_CODE } from './codes.ts';
import { COUPON_DISCOUNT_TYPES, COUPON_STATUSES, type Coupon, type CouponStatus } from './coupon.entity.ts';
import { checkAmount, currencyField } from './money-fields.ts';
import { BASIS_POINTS, fromScaledInteger, MAX_MINOR, MoneyError, toMajor, toScaledInteger } from './money.ts';

/**
 * Why a coupon cannot be used (validate's error_code), in the order they are
 * checked. The first that applies is answered.
 */
export const COUPON_ERROR_CODES = [
  'not_found', 'inactive', 'expired', 'not_yet_valid', 'plan_inactive', 'not_applicable_to_plan', 'currency_mismatch',
  'max_redemptions_reached', 'max_per_user_reached',
] as const;
export type CouponErrorCode = (typeof COUPON_ERROR_CODES)[number];

export const COUPON_ERROR_MEANINGS: Record<CouponErrorCode, string> = {
  not_found: 'no coupon has this code',
  inactive: 'an administrator deactivated the coupon',
  expired: 'valid_until has passed',
  not_yet_valid: 'valid_from is still ahead',
  plan_inactive: 'the plan is no longer on sale',
  not_applicable_to_plan: 'the plan is not among applicable_plan_ids',
  currency_mismatch: 'the coupon is in another currency than the plan',
  max_redemptions_reached: 'the coupon has been redeemed max_redemptions times',
  max_per_user_reached: 'the caller has redeemed it max_redemptions_per_user times',
};

export const couponRecord = z.object({
  id: z.uuid(),
  code: z.string(),
  description: orNull(z.string()),
  discount_type: z.enum(COUPON_DISCOUNT_TYPES),
  discount_value: z.number().describe('percent: the percentage off (12.5 = 12.5 %); amount: the amount off in major units of `currency`'),
  currency: orNull(z.string()),
  applicable_plan_ids: z.array(z.uuid()).describe('Empty: every plan'),
  max_redemptions: orNull(z.number().int()).describe('null: no limit'),
  max_redemptions_per_user: orNull(z.number().int()).describe('null: no limit'),
  redemption_count: z.number().int(),
  valid_from: timestamp(),
  valid_until: timestampOrNull(),
  status: z.enum(COUPON_STATUSES).describe('active, inactive (deactivated) or expired (valid_until passed)'),
  created_at: timestamp(),
  updated_at: timestamp(),
});

/** Single-coupon replies carry its version as ETag. */
export const couponResource = versioned(couponRecord);

/** A coupon's status at `now`: inactive once deactivated, expired once valid_until has passed. */
export function couponStatus(coupon: Pick<Coupon, 'status' | 'valid_until'>, now: Date): CouponStatus {
  if (coupon.status === 'inactive') return 'inactive';
  if (coupon.valid_until && coupon.valid_until.getTime() <= now.getTime()) return 'expired';
  return 'active';
}

/** The discount as the API shows it: the percentage (basis points / 100) or the amount in major units. */
export function discountValue(coupon: Pick<Coupon, 'discount_type' | 'percent_off_bp' | 'amount_off_minor' | 'currency'>): number {
  return coupon.discount_type === 'percent' ? fromScaledInteger(coupon.percent_off_bp!, 2) : toMajor(coupon.amount_off_minor!, coupon.currency!);
}

/** The value a route hands over for a coupon record. */
export function presentCoupon(coupon: Coupon, now: Date): Omit<Coupon, 'status'> & { discount_value: number; status: CouponStatus } {
  return { ...coupon, discount_value: discountValue(coupon), status: couponStatus(coupon, now) };
}

export const couponValidation = z.object({
  valid: z.boolean(),
  coupon: couponRecord.nullable().describe('null when no coupon has the code'),
  error_code: z.enum(COUPON_ERROR_CODES).nullable()
    .describe(`null when valid; otherwise the first reason that applies: ${COUPON_ERROR_CODES.map((c) => `\`${c}\` (${COUPON_ERROR_MEANINGS[c]})`).join(', ')}`),
});

export const couponCodeField = () => z.string().trim()
  .regex(COUPON_CODE, 'Must be 3 to 50 letters, digits, - or _, starting with a letter or digit')
  .transform((v) => v.toUpperCase());

/** Largest max_redemptions (and per user) a coupon may name. */
export const MAX_COUPON_REDEMPTIONS = 1_000_000_000;
/** Most plans a coupon may be limited to. */
export const MAX_APPLICABLE_PLANS = 100;

export const createCouponBody = withExample(z.strictObject({
  code: couponCodeField().optional().describe('Left out: the server makes a 10-character code. Kept in upper case; matched whatever case a client types.'),
  description: z.string().trim().max(500).nullable().default(null),
  discount_type: z.enum(COUPON_DISCOUNT_TYPES).describe('percent: a percentage off; amount: a fixed amount off in `currency`'),
  discount_value: z.number().positive('Must be above 0').max(MAX_MINOR, 'Too large')
    .describe('percent: 0.01..100 with at most 2 decimals; amount: in major units of `currency` with at most its minor unit\'s decimals'),
  currency: currencyField().nullable().default(null).describe('Required for amount coupons; for percent coupons it limits the coupon to plans priced in it'),
  applicable_plan_ids: z.array(uuid()).max(MAX_APPLICABLE_PLANS).default([]).describe('Plans the coupon applies to; empty: every plan'),
  max_redemptions: z.number().int().min(1).max(MAX_COUPON_REDEMPTIONS).nullable().default(null).describe('null: no limit'),
  max_redemptions_per_user: z.number().int().min(1).max(MAX_COUPON_REDEMPTIONS).nullable().default(1).describe('Default 1; null: no limit'),
  valid_from: dateTime().optional().describe('Default: now'),
  valid_until: dateTime().nullable().default(null).describe('null: no end'),
}).superRefine((body, ctx) => {
  if (body.discount_type === 'percent') {
    try {
      toScaledInteger(body.discount_value, 2, BASIS_POINTS);
    } catch (error) {
      if (!(error instanceof MoneyError)) throw error;
      ctx.addIssue({ code: 'custom', path: ['discount_value'], message: `A percentage: ${error.message}` });
    }
  } else if (!body.currency) {
    ctx.addIssue({ code: 'custom', path: ['currency'], message: 'Required for an amount coupon' });
  } else {
    checkAmount(ctx, body.discount_value, body.currency, 'discount_value');
  }
  if (body.valid_from && body.valid_until && Date.parse(body.valid_until) <= Date.parse(body.valid_from)) {
    ctx.addIssue({ code: 'custom', path: ['valid_until'], message: 'Must be after valid_from' });
  }
}), { code: 'WELCOME20', description: '20% off the first payment for new subscribers', discount_type: 'percent', discount_value: 20, max_redemptions: 1000, max_redemptions_per_user: 1 });
export type CreateCouponInput = z.output<typeof createCouponBody>;
