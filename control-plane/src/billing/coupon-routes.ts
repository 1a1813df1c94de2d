// Coupons (document 1 §4.5; DESIGN.md §5, §6): validation for subscribers,
// and the administrators' create, list, read and deactivate.
import { z } from 'zod';
import { paginate } from '../http/paging.ts';
import { bare, data, page, reply, type RateLimitRule } from '../http/route.ts';
import { pageQuery, sortParam, uuid } from '../http/schemas.ts';
import { canonicalCouponCode } from './codes.ts';
import {
  COUPON_ERROR_CODES, COUPON_ERROR_MEANINGS, couponRecord, couponResource, couponValidation, createCouponBody, presentCoupon,
} from './coupon-record.ts';
import { createCoupon, deactivateCoupon, findCoupon, validateCoupon } from './coupon-service.ts';
import { Coupon, COUPON_STATUSES } from './coupon.entity.ts';
import { defineBillingRoute as defineRoute, type BillingServices } from './services.ts';

const adminTags = ['Administration: coupons'];
const read = { permission: 'admin.billing.read' } as const;
const manage = { permission: 'admin.billing.manage' } as const;
const couponParams = z.strictObject({ coupon_id: uuid() });

/** Validation tells whether a code exists: a budget per caller and per address keeps code guessing slow. */
export const VALIDATE_LIMITS: RateLimitRule<BillingServices>[] = [
  { name: 'coupon-validate:caller', limit: 30, windowSeconds: 600, by: 'caller' },
  { name: 'coupon-validate:ip', limit: 100, windowSeconds: 600, by: 'ip' },
];

export const validateCouponRoute = defineRoute({
  method: 'post', path: '/v1/coupons/validate', tags: ['Coupons'], access: { permission: 'coupons.validate', resourceType: 'user' },
  summary: 'Check a coupon code for a plan',
  description: 'Whether the caller could use the code for the plan now; nothing is redeemed (the subscription operations redeem). '
    + '`coupon` is null only for an unknown code. error_code values, checked in this order: '
    + `${COUPON_ERROR_CODES.map((c) => `\`${c}\` (${COUPON_ERROR_MEANINGS[c]})`).join(', ')}. An unknown plan is a 404. `
    + `Limited to ${VALIDATE_LIMITS[0]!.limit} checks per ${VALIDATE_LIMITS[0]!.windowSeconds / 60} minutes per caller (429).`,
  body: z.strictObject({
    code: z.string().trim().min(1).max(50),
    plan_id: uuid(),
  }),
  rateLimits: VALIDATE_LIMITS,
  responses: { 200: bare(couponValidation) },
  async handler({ body, rc, app }) {
    const result = await validateCoupon(app, rc, body);
    return { ...result, coupon: result.coupon ? presentCoupon(result.coupon, app.clock.now()) : null };
  },
});

/** `LIKE` pattern characters in a prefix, escaped. */
const likePrefix = (prefix: string) => `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export const listCouponsRoute = defineRoute({
  method: 'get', path: '/v1/admin/coupons', tags: adminTags, access: read,
  summary: 'List coupons',
  description: 'Newest first by default. `status` filters by the status shown (expired: valid_until has passed); `code` by the start of the code, in any case.',
  query: pageQuery({
    status: z.enum(COUPON_STATUSES).optional(),
    code: z.string().trim().max(50).regex(/^[A-Za-z0-9_-]*$/, 'Must be the start of a code (letters, digits, - and _)').optional(),
    sort: sortParam(['created_at', 'code'], '-created_at'),
  }),
  responses: { 200: page(couponRecord) },
  async handler({ query, rc, app }) {
    const now = app.clock.now();
    const where: Record<string, unknown> = {};
    if (query.status === 'inactive') where.status = 'inactive';
    if (query.status === 'active') Object.assign(where, { status: 'active', $or: [{ valid_until: null }, { valid_until: { $gt: now } }] });
    if (query.status === 'expired') Object.assign(where, { status: 'active', valid_until: { $lte: now } });
    if (query.code) where.code = { $like: likePrefix(canonicalCouponCode(query.code)) };
    const found = await paginate(rc.em, Coupon, { where, limit: query.limit, cursor: query.cursor, sort: query.sort });
    return { items: found.items.map((c) => presentCoupon(c, now)), meta: found.meta };
  },
});

export const createCouponRoute = defineRoute({
  method: 'post', path: '/v1/admin/coupons', tags: adminTags, access: manage,
  summary: 'Create a coupon',
  description: 'A percentage off (`discount_type: percent`, 0.01..100) or a fixed amount off (`amount`, in major units of `currency`). '
    + 'The code is kept in upper case and must be unique whatever its case (409 CONFLICT); left out, the server makes one. '
    + 'Listed plans must exist and, when a currency is given, be priced in it. Audit-logged with the acting administrator.',
  body: createCouponBody,
  responses: { 201: data(couponResource) },
  errors: ['CONFLICT'],
  async handler({ body, rc, app }) {
    const coupon = await createCoupon(app, rc, body);
    return reply.created(presentCoupon(coupon, app.clock.now()), `/v1/admin/coupons/${coupon.id}`);
  },
});

export const readCouponRoute = defineRoute({
  method: 'get', path: '/v1/admin/coupons/:coupon_id', tags: adminTags, access: read,
  summary: 'Read a coupon',
  params: couponParams,
  responses: { 200: data(couponResource) },
  async handler({ params, rc, app }) {
    return presentCoupon(await findCoupon(rc.em, params.coupon_id), app.clock.now());
  },
});

export const deactivateCouponRoute = defineRoute({
  method: 'delete', path: '/v1/admin/coupons/:coupon_id', tags: adminTags, access: manage,
  summary: 'Deactivate a coupon',
  description: 'Answers the coupon with status inactive: it can no longer be redeemed; redemptions made stand. Coupons are never deleted '
    + '(redemptions refer to them). Audit-logged with the acting administrator.',
  params: couponParams,
  responses: { 200: data(couponResource) },
  async handler({ params, rc, app }) {
    return presentCoupon(await deactivateCoupon(app, rc, params.coupon_id), app.clock.now());
  },
});

export const couponRoutes = [validateCouponRoute, listCouponsRoute, createCouponRoute, readCouponRoute, deactivateCouponRoute];
