// Coupons (document 1 §2, §4.5; DESIGN.md §5): administrators create, list,
// read and deactivate them (audit-logged); subscribers validate a code for a
// plan; the billing engine redeems one inside its own transaction.
//
// Redemption is serialised per coupon by a row lock (SELECT … FOR UPDATE) held
// until the caller's transaction ends: every rule (limits overall and per
// user, validity window, plan) is checked under it, then the count goes up
// and the redemption is recorded. So concurrent redemptions never pass a
// limit (a check constraint on the table holds max_redemptions as well). The
// lock is held to the end of the caller's transaction, so the engine should
// redeem late in it (after the gateway has answered).
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import { inTransaction, type RequestContext } from '../core/request-context.ts';
import { ApiError, found, validationError, callerUserId as callerUserIdOf } from '../http/errors.ts';
import { Plan } from './billing.entities.ts';
import { canonicalCouponCode, COUPON_CODE, generateCouponCode } from './codes.ts';
import { COUPON_ERROR_MEANINGS, couponStatus, type CouponErrorCode, type CreateCouponInput } from './coupon-record.ts';
import { Coupon, CouponRedemption } from './coupon.entity.ts';
import { BASIS_POINTS, MoneyError, percentOf, toMinor, toScaledInteger } from './money.ts';
import type { BillingServices } from './services.ts';

const callerUserId = (rc: RequestContext): string => callerUserIdOf(rc, 'Coupons are validated for user accounts');

export async function findCoupon(em: EntityManager, couponId: string): Promise<Coupon> {
  return found(await em.findOne(Coupon, couponId), 'Coupon');
}

/** The coupon with this code, whatever case it is typed in; null when none (or the text cannot be a code). */
export async function findCouponByCode(em: EntityManager, code: string, options: { lock?: boolean } = {}): Promise<Coupon | null> {
  const canonical = canonicalCouponCode(code);
  if (!COUPON_CODE.test(canonical)) return null;
  return em.findOne(Coupon, { code: canonical }, options.lock ? { lockMode: LockMode.PESSIMISTIC_WRITE, refresh: true } : {});
}

const SNAPSHOT_FIELDS = [
  'code', 'description', 'discount_type', 'percent_off_bp', 'amount_off_minor', 'currency', 'applicable_plan_ids', 'max_redemptions',
  'max_redemptions_per_user', 'valid_from', 'valid_until', 'status',
] as const satisfies readonly (keyof Coupon)[];

/**
 * Creates a coupon (an administrator). The listed plans must exist and, for a
 * coupon with a currency, be priced in it (400 on applicable_plan_ids);
 * a code already taken, in any case, is a 409.
 */
export async function createCoupon(app: BillingServices, rc: RequestContext, input: CreateCouponInput): Promise<Coupon> {
  const now = app.clock.now();
  const validFrom = input.valid_from ? new Date(input.valid_from) : now;
  const validUntil = input.valid_until ? new Date(input.valid_until) : null;
  if (validUntil && validUntil.getTime() <= Math.max(validFrom.getTime(), now.getTime())) {
    throw validationError([{ field: 'valid_until', message: 'Must be in the future and after valid_from' }]);
  }
  const planIds = [...new Set(input.applicable_plan_ids)];
  if (planIds.length) {
    const plans = await rc.em.find(Plan, { id: { $in: planIds } });
    const unknown = planIds.filter((id) => !plans.some((p) => p.id === id));
    if (unknown.length) throw validationError([{ field: 'applicable_plan_ids', message: `No such plan: ${unknown.join(', ')}` }]);
    const otherCurrency = plans.filter((p) => input.currency && p.currency !== input.currency);
    if (otherCurrency.length) {
      throw validationError([{ field: 'applicable_plan_ids', message: `Priced in another currency than ${input.currency}: ${otherCurrency.map((p) => p.id).join(', ')}` }]);
    }
  }
  const code = input.code ?? generateCouponCode();
  if (await rc.em.count(Coupon, { code })) throw new ApiError('CONFLICT', `A coupon with the code ${code} already exists`);
  const coupon = rc.em.create(Coupon, {
    code,
    description: input.description || null,
    discount_type: input.discount_type,
    percent_off_bp: input.discount_type === 'percent' ? toScaledInteger(input.discount_value, 2, BASIS_POINTS) : null,
    amount_off_minor: input.discount_type === 'amount' ? toMinor(input.discount_value, input.currency!) : null,
    currency: input.currency,
    applicable_plan_ids: planIds,
    max_redemptions: input.max_redemptions,
    max_redemptions_per_user: input.max_redemptions_per_user,
    redemption_count: 0,
    valid_from: validFrom,
    valid_until: validUntil,
    status: 'active',
  } as never);
  recordAudit(rc, { action: 'coupon.created', resource_type: 'coupon', resource_id: coupon.id, changes: changesOf({}, coupon, SNAPSHOT_FIELDS) });
  await rc.em.flush();
  return coupon;
}

/** Deactivates a coupon (an administrator): no further redemptions; past ones stand. Already inactive: unchanged. */
export async function deactivateCoupon(app: BillingServices, rc: RequestContext, couponId: string): Promise<Coupon> {
  const coupon = await findCoupon(rc.em, couponId);
  if (coupon.status === 'inactive') return coupon;
  coupon.status = 'inactive';
  coupon.deactivated_at = app.clock.now();
  recordAudit(rc, {
    action: 'coupon.deactivated', resource_type: 'coupon', resource_id: coupon.id,
    changes: { status: { from: 'active', to: 'inactive' } }, metadata: { code: coupon.code, redemption_count: coupon.redemption_count },
  });
  await rc.em.flush();
  return coupon;
}

/**
 * The first reason the coupon cannot be redeemed by `userId` for `plan` at
 * `now` (COUPON_ERROR_CODES order), or null when it can.
 */
export async function couponProblem(em: EntityManager, coupon: Coupon | null, plan: Plan, userId: string, now: Date): Promise<CouponErrorCode | null> {
  if (!coupon) return 'not_found';
  const status = couponStatus(coupon, now);
  if (status !== 'active') return status;
  if (coupon.valid_from.getTime() > now.getTime()) return 'not_yet_valid';
  if (!plan.is_active) return 'plan_inactive';
  if (coupon.applicable_plan_ids.length && !coupon.applicable_plan_ids.includes(plan.id)) return 'not_applicable_to_plan';
  if (coupon.currency && coupon.currency !== plan.currency) return 'currency_mismatch';
  if (coupon.max_redemptions != null && coupon.redemption_count >= coupon.max_redemptions) return 'max_redemptions_reached';
  if (coupon.max_redemptions_per_user != null) {
    const mine = await em.count(CouponRedemption, { coupon: coupon.id, user: userId });
    if (mine >= coupon.max_redemptions_per_user) return 'max_per_user_reached';
  }
  return null;
}

export interface CouponValidation {
  valid: boolean;
  coupon: Coupon | null;
  error_code: CouponErrorCode | null;
}

/** POST /v1/coupons/validate: whether the caller could redeem the code for the plan now (404 for an unknown plan). */
export async function validateCoupon(app: BillingServices, rc: RequestContext, input: { code: string; plan_id: string }): Promise<CouponValidation> {
  const userId = callerUserId(rc);
  const plan = found(await rc.em.findOne(Plan, input.plan_id), 'Plan');
  const coupon = await findCouponByCode(rc.em, input.code);
  const problem = await couponProblem(rc.em, coupon, plan, userId, app.clock.now());
  return { valid: problem === null, coupon, error_code: problem };
}

export interface RedeemCouponInput {
  code: string;
  userId: string;
  planId: string;
  subscriptionId?: string | null;
  invoiceId?: string | null;
  /** The request field a refusal is reported on (default coupon_code). */
  field?: string;
}

/**
 * Redeems a coupon for a user and plan: for the billing engine, inside its
 * transaction (it joins it; called outside one, it runs in its own). Checks
 * every rule under the coupon's row lock, counts the redemption and records
 * it. A coupon that cannot be used is a 400 VALIDATION_ERROR on `field`
 * carrying `error_code`, and nothing is stored.
 */
export async function redeemCoupon(app: BillingServices, rc: RequestContext, input: RedeemCouponInput): Promise<{ coupon: Coupon; redemption: CouponRedemption }> {
  return inTransaction(rc, async (tx) => {
    const em = tx.em;
    const coupon = await findCouponByCode(em, input.code, { lock: true });
    const plan = found(await em.findOne(Plan, input.planId), 'Plan');
    const problem = await couponProblem(em, coupon, plan, input.userId, app.clock.now());
    if (problem) throw couponRefusal(problem, input.field ?? 'coupon_code');
    coupon!.redemption_count += 1;
    const redemption = em.create(CouponRedemption, {
      coupon: coupon!,
      user: input.userId,
      plan: plan.id,
      subscription: input.subscriptionId ?? null,
      invoice_id: input.invoiceId ?? null,
    } as never);
    await em.flush();
    return { coupon: coupon!, redemption };
  });
}

/** A coupon that cannot be used, as the 400 an operation taking a coupon code answers. */
export function couponRefusal(code: CouponErrorCode, field = 'coupon_code'): ApiError {
  return new ApiError('VALIDATION_ERROR', `The coupon cannot be used: ${COUPON_ERROR_MEANINGS[code]}`, {
    errors: [{ field, message: `Coupon not usable: ${code}` }],
    details: { error_code: code },
  });
}

/**
 * What the coupon takes off `amountMinor` (minor units of `currency`): a
 * percentage rounded half up, or the fixed amount, never more than the
 * amount itself. An amount coupon cannot discount another currency
 * (MoneyError; couponProblem refuses that pairing before it comes to this).
 */
export function couponDiscount(coupon: Coupon, amountMinor: number, currency: string): number {
  if (coupon.discount_type === 'percent') return percentOf(amountMinor, coupon.percent_off_bp!);
  if (coupon.currency !== currency) throw new MoneyError(`A ${coupon.currency} coupon cannot discount an amount in ${currency}`);
  return Math.min(coupon.amount_off_minor!, amountMinor);
}
