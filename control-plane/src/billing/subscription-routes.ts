// Subscriptions (document 1 §4.3; DESIGN.md §5, §6) and invoices (§4.5) of
// the calling subscriber: list, create, read, change plan, cancel, preview;
// list and read invoices.
import { z } from 'zod';
import { paginate } from '../http/paging.ts';
import { data, page, reply } from '../http/route.ts';
import { lineText, pageQuery, uuid, withExample } from '../http/schemas.ts';
import { found } from '../http/errors.ts';
import type { RequestContext } from '../core/request-context.ts';
import { PLAN_TYPES, Subscription, SUBSCRIPTION_STATUSES } from './billing.entities.ts';
import { Invoice } from './invoice.entity.ts';
import {
  invoiceRecord, presentInvoice, presentPreview, presentSubscription, presentSubscriptions, previewRecord, subscriptionRecord, subscriptionResource,
} from './subscription-record.ts';
import { callerUserId, cancelSubscription, changePlan, createSubscription, findCallersSubscription, previewPlanChange } from './subscription-service.ts';
import { chooseSubscriptionPaymentMethod } from './payment-method-service.ts';
import { defineBillingRoute as defineRoute } from './services.ts';

const tags = ['Subscriptions'];
const read = { permission: 'subscriptions.read', resourceType: 'user' } as const;
const write = { permission: 'subscriptions.write', resourceType: 'user' } as const;
const subscriptionParams = z.strictObject({ subscription_id: uuid() });
export const couponCode = () => z.string().trim().min(1).max(50);
export const reasonText = () => lineText(500);
const newestFirst = { field: 'created_at', direction: 'desc' } as const;

export const subscriptionFilters = {
  type: z.enum(PLAN_TYPES).optional(),
  status: z.enum(SUBSCRIPTION_STATUSES).optional(),
};

/** One page of subscriptions matching `where` plus the type and status filters, newest first, as the API shows them. */
export async function pageOfSubscriptions(rc: RequestContext, where: Record<string, unknown>, query: { type?: string; status?: string; limit: number; cursor?: string }) {
  const filtered = { ...where, ...(query.type ? { type: query.type } : {}), ...(query.status ? { status: query.status } : {}) };
  const found = await paginate(rc.em, Subscription, { where: filtered as never, limit: query.limit, cursor: query.cursor, sort: newestFirst, populate: ['plan'] });
  return { items: await presentSubscriptions(rc.em, found.items), meta: found.meta };
}

export const listSubscriptionsRoute = defineRoute({
  method: 'get', path: '/v1/subscriptions', tags, access: read,
  summary: 'List my subscriptions',
  description: 'Every type, newest first; filters type and status.',
  query: pageQuery(subscriptionFilters),
  responses: { 200: page(subscriptionRecord) },
  async handler({ query, rc }) {
    return pageOfSubscriptions(rc, { user: callerUserId(rc) }, query);
  },
});

export const createSubscriptionRoute = defineRoute({
  method: 'post', path: '/v1/subscriptions', tags, access: write,
  summary: 'Subscribe to a plan',
  description: 'The plan must be on sale (404 unknown, 409 CONFLICT deactivated); its type is the subscription\'s, and a live subscription of that type '
    + '(trialing, active, past_due, paused) is a 409 SUBSCRIPTION_EXISTS. A plan with trial_days > 0 starts `trialing` with no charge; otherwise '
    + 'the first period is invoiced and paid at once — the account balance in the plan\'s currency first, then the payment method — and the subscription is '
    + '`active`. A declined card is a 402 PAYMENT_FAILED (`decline_code`) and nothing is created: no subscription, no coupon redemption, no balance debit. '
    + '`payment_method_id` must be one of the caller\'s methods (400 otherwise). `coupon_code` is redeemed on use (400 with `error_code` when not usable). '
    + 'A plan\'s trial is offered once per user and plan type: a user who had a trial of the type before (any plan) is charged at once. '
    + 'Idempotency-Key: a replay answers the first result; a retry after a failure charges the gateway with the same key.',
  body: withExample(z.strictObject({ plan_id: uuid(), payment_method_id: uuid(), coupon_code: couponCode().optional() }),
    { plan_id: '0b7e4a52-9c1d-4f3a-8e26-5d9f1c3b7a40', payment_method_id: '6a1f3e8b-2d4c-4b9e-a7f0-3c5e9d1b8f26', coupon_code: 'WELCOME20' }),
  idempotent: true,
  responses: { 201: data(subscriptionResource) },
  errors: ['SUBSCRIPTION_EXISTS', 'PAYMENT_FAILED', 'CONFLICT'],
  async handler({ body, rc, app, ctx }) {
    const subscription = await createSubscription(app, rc, { ...body, userId: callerUserId(rc), idempotencyKey: ctx.get('idempotency-key') || undefined });
    return reply.created(await presentSubscription(rc.em, subscription), `/v1/subscriptions/${subscription.id}`);
  },
});

export const readSubscriptionRoute = defineRoute({
  method: 'get', path: '/v1/subscriptions/:subscription_id', tags, access: read,
  summary: 'Read a subscription', description: 'Owner only (another user\'s is a 404).',
  params: subscriptionParams,
  responses: { 200: data(subscriptionResource) },
  async handler({ params, rc }) {
    return presentSubscription(rc.em, await findCallersSubscription(rc, params.subscription_id));
  },
});

export const changePlanRoute = defineRoute({
  method: 'post', path: '/v1/subscriptions/:subscription_id/change-plan', tags, access: write,
  summary: 'Change plan (same type), prorated to the second',
  description: 'The new plan must be on sale, of the same type (409 PLAN_TYPE_MISMATCH) and priced in the subscription\'s currency (400). The new terms apply '
    + 'at once and the period stays. An active subscription is invoiced now: what was paid for the unused time of the period (net of discounts, and the tax '
    + 'paid on it) is credited, and the same time on the new plan charged at its price, less `coupon_code` (an extension, as on the preview) and plus tax; '
    + 'the account balance pays first, and a negative total goes to the balance. A trialing one changes without a charge. A declined card is a 402 and '
    + 'nothing changes. The preview with the same clock shows the same numbers.',
  params: subscriptionParams,
  body: z.strictObject({ plan_id: uuid(), coupon_code: couponCode().optional() }),
  idempotent: true,
  responses: { 200: data(subscriptionResource) },
  errors: ['PLAN_TYPE_MISMATCH', 'PAYMENT_FAILED', 'CONFLICT'],
  async handler({ params, body, rc, app, ctx }) {
    const subscription = await changePlan(app, rc, params.subscription_id, { ...body, idempotencyKey: ctx.get('idempotency-key') || undefined });
    return presentSubscription(rc.em, subscription);
  },
});

export const cancelSubscriptionRoute = defineRoute({
  method: 'post', path: '/v1/subscriptions/:subscription_id/cancel', tags, access: write,
  summary: 'Cancel a subscription',
  description: 'Default: at the end of the current period (cancel_at_period_end true; access continues; `canceled` when the period ends). '
    + '`immediate: true`: `canceled` now, no refund, open invoices voided. Audit-logged with the reason. An ended subscription is a 409.',
  params: subscriptionParams,
  body: z.strictObject({ immediate: z.boolean().default(false), reason: reasonText().optional() }),
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    const subscription = await findCallersSubscription(rc, params.subscription_id);
    return presentSubscription(rc.em, await cancelSubscription(app, rc, subscription, body));
  },
});

export const chooseSubscriptionPaymentMethodRoute = defineRoute({
  method: 'patch', path: '/v1/subscriptions/:subscription_id', tags, access: write,
  summary: 'Choose the payment method a subscription is billed to',
  description: 'A subscription follows the account\'s default payment method (`payment_method_chosen` false) unless one is chosen for it here: '
    + '`payment_method_id` one of the caller\'s methods (400 otherwise) bills it there whatever the default; null makes it follow the default again. '
    + 'An open renewal invoice of the subscription (past due) is charged to the method at once; the answer shows the subscription after that attempt. '
    + 'An ended subscription (canceled, expired) or a complimentary one is a 409. If-Match: a stale ETag is a 412 and nothing changes. Audit-logged.',
  params: subscriptionParams,
  body: z.strictObject({ payment_method_id: uuid().nullable().describe('null: follow the account\'s default payment method') }),
  ifMatch: ({ params, rc }) => findCallersSubscription(rc, params.subscription_id),
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    return presentSubscription(rc.em, await chooseSubscriptionPaymentMethod(app, rc, params.subscription_id, body.payment_method_id));
  },
});

export const previewPlanChangeRoute = defineRoute({
  method: 'post', path: '/v1/subscriptions/:subscription_id/preview', tags, access: read,
  summary: 'Preview a plan change',
  description: 'What change-plan would invoice now, priced by the same function and with the account balance it would apply, without committing anything: '
    + '`amount_due_now` is the change\'s invoice `amount_due`, `balance_applied` and `balance_credit` its balance movements. Same refusals as change-plan.',
  params: subscriptionParams,
  body: z.strictObject({ plan_id: uuid(), coupon_code: couponCode().optional() }),
  responses: { 200: data(previewRecord) },
  errors: ['PLAN_TYPE_MISMATCH', 'CONFLICT'],
  async handler({ params, body, rc, app }) {
    const { subscription, proration } = await previewPlanChange(app, rc, params.subscription_id, body);
    return presentPreview(subscription, proration);
  },
});

const invoiceTags = ['Invoices'];
const invoicesRead = { permission: 'invoices.read', resourceType: 'user' } as const;

export const listInvoicesRoute = defineRoute({
  method: 'get', path: '/v1/invoices', tags: invoiceTags, access: invoicesRead,
  summary: 'List my invoices',
  description: 'Newest first; filter status (open, paid, uncollectible, void). Drafts exist only inside the transaction that pays them and are never listed.',
  query: pageQuery({ status: z.enum(['open', 'paid', 'uncollectible', 'void']).optional() }),
  responses: { 200: page(invoiceRecord) },
  async handler({ query, rc }) {
    const where: Record<string, unknown> = { user: callerUserId(rc), status: query.status ?? { $ne: 'draft' } };
    const found = await paginate(rc.em, Invoice, { where, limit: query.limit, cursor: query.cursor, sort: newestFirst });
    return { items: found.items.map(presentInvoice), meta: found.meta };
  },
});

export const readInvoiceRoute = defineRoute({
  method: 'get', path: '/v1/invoices/:invoice_id', tags: invoiceTags, access: invoicesRead,
  summary: 'Read an invoice', description: 'Owner only (another user\'s is a 404).',
  params: z.strictObject({ invoice_id: uuid() }),
  responses: { 200: data(invoiceRecord) },
  async handler({ params, rc }) {
    const invoice = found(await rc.em.findOne(Invoice, { id: params.invoice_id, user: callerUserId(rc), status: { $ne: 'draft' } }), 'Invoice');
    return presentInvoice(invoice);
  },
});

export const subscriptionRoutes = [
  listSubscriptionsRoute, createSubscriptionRoute, readSubscriptionRoute, chooseSubscriptionPaymentMethodRoute, changePlanRoute, cancelSubscriptionRoute,
  previewPlanChangeRoute,
  listInvoicesRoute, readInvoiceRoute,
];
