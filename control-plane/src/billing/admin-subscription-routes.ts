// Administration of subscriptions (document 1 §4.8; DESIGN.md §6): list all,
// a user's list, assign, read, patch (If-Match), cancel, pause, resume,
// reactivate, extend. Every write is audit-logged with the acting
// administrator and the reason or admin_note.
import { z } from 'zod';
import { User } from '../accounts/index.ts';
import { found } from '../http/errors.ts';
import { data, page, reply } from '../http/route.ts';
import { dateTime, pageQuery, queryDateTime, uuid } from '../http/schemas.ts';
import { presentSubscription, subscriptionRecord, subscriptionResource } from './subscription-record.ts';
import { couponCode, pageOfSubscriptions, reasonText, subscriptionFilters } from './subscription-routes.ts';
import {
  cancelSubscription, createSubscription, extendSubscription, findUsersSubscription, patchSubscription, pauseSubscription, reactivateSubscription,
  resumeSubscription,
} from './subscription-service.ts';
import { defineBillingRoute as defineRoute } from './services.ts';

const tags = ['Administration: subscriptions'];
const read = { permission: 'admin.subscriptions.read' } as const;
const manage = { permission: 'admin.subscriptions.manage' } as const;
const userParams = z.strictObject({ user_id: uuid() });
const subscriptionParams = z.strictObject({ user_id: uuid(), subscription_id: uuid() });
const note = () => reasonText().optional().describe('Kept in the audit trail only');

export const listAllSubscriptionsRoute = defineRoute({
  method: 'get', path: '/v1/admin/subscriptions', tags, access: read,
  summary: 'List all subscriptions', description: 'Newest first (created_at descending); filters type, status, plan_id, created_after, created_before.',
  query: pageQuery({ ...subscriptionFilters, plan_id: uuid().optional(), created_after: queryDateTime().optional(), created_before: queryDateTime().optional() }),
  responses: { 200: page(subscriptionRecord) },
  async handler({ query, rc }) {
    const where: Record<string, unknown> = {};
    if (query.plan_id) where.plan = query.plan_id;
    if (query.created_after || query.created_before) {
      where.created_at = { ...(query.created_after ? { $gte: query.created_after } : {}), ...(query.created_before ? { $lt: query.created_before } : {}) };
    }
    return pageOfSubscriptions(rc, where, query);
  },
});

export const listUserSubscriptionsRoute = defineRoute({
  method: 'get', path: '/v1/admin/users/:user_id/subscriptions', tags, access: read,
  summary: 'List a user\'s subscriptions', description: 'Newest first; filters type and status. An unknown user is a 404.',
  params: userParams,
  query: pageQuery(subscriptionFilters),
  responses: { 200: page(subscriptionRecord) },
  async handler({ params, query, rc }) {
    found(await rc.em.findOne(User, params.user_id), 'User');
    return pageOfSubscriptions(rc, { user: params.user_id }, query);
  },
});

export const assignSubscriptionRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions', tags, access: manage,
  summary: 'Assign a plan to a user',
  description: '`payment_method_id` null (or left out) makes a complimentary subscription: its invoices are issued fully discounted and nothing is charged. '
    + 'With a method (one of the user\'s), the first period is charged now unless the subscription starts in a trial (the plan\'s trial_days, or `trial_end`; '
    + 'a past `trial_end` skips the trial). `current_period_end` overrides the first period\'s end. 409 SUBSCRIPTION_EXISTS when a live subscription of the '
    + 'type exists; 402 when the card declines (nothing created); 409 ACCOUNT_SCHEDULED_FOR_DELETION while the account awaits deletion (nothing may be billed to it). '
    + '`admin_note` goes to the audit trail only.',
  params: userParams,
  body: z.strictObject({
    plan_id: uuid(),
    payment_method_id: uuid().nullable().default(null),
    coupon_code: couponCode().optional(),
    trial_end: dateTime().optional(),
    current_period_end: dateTime().optional(),
    auto_renew: z.boolean().default(true),
    admin_note: note(),
  }),
  idempotent: true,
  responses: { 201: data(subscriptionResource) },
  errors: ['SUBSCRIPTION_EXISTS', 'PAYMENT_FAILED', 'CONFLICT', 'ACCOUNT_SCHEDULED_FOR_DELETION'],
  async handler({ params, body, rc, app, ctx }) {
    found(await rc.em.findOne(User, params.user_id), 'User');
    const subscription = await createSubscription(app, rc, {
      ...body, userId: params.user_id, trial_end: body.trial_end ? new Date(body.trial_end) : undefined,
      current_period_end: body.current_period_end ? new Date(body.current_period_end) : undefined,
      idempotencyKey: ctx.get('idempotency-key') ? `admin:${ctx.get('idempotency-key')}` : undefined,
    });
    return reply.created(await presentSubscription(rc.em, subscription), `/v1/admin/users/${params.user_id}/subscriptions/${subscription.id}`);
  },
});

export const readUserSubscriptionRoute = defineRoute({
  method: 'get', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id', tags, access: read,
  summary: 'Read a user\'s subscription', params: subscriptionParams,
  responses: { 200: data(subscriptionResource) },
  async handler({ params, rc }) {
    return presentSubscription(rc.em, await findUsersSubscription(rc.em, params.user_id, params.subscription_id));
  },
});

export const patchSubscriptionRoute = defineRoute({
  method: 'patch', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id', tags, access: manage,
  summary: 'Change a user\'s subscription',
  description: 'All fields optional. `plan_id` (same type, 409 PLAN_TYPE_MISMATCH) is prorated and charged like the subscriber\'s change-plan; '
    + '`payment_method_id` null switches to complimentary billing; `current_period_end` must be after the period start. If-Match: a stale ETag is a 412 and '
    + 'nothing changes. Audit-logged with the acting admin and `admin_note`.',
  params: subscriptionParams,
  body: z.strictObject({
    plan_id: uuid().optional(),
    payment_method_id: uuid().nullable().optional(),
    auto_renew: z.boolean().optional(),
    current_period_end: dateTime().optional(),
    cancel_at_period_end: z.boolean().optional(),
    admin_note: note(),
  }),
  ifMatch: ({ params, rc }) => findUsersSubscription(rc.em, params.user_id, params.subscription_id),
  responses: { 200: data(subscriptionResource) },
  errors: ['PLAN_TYPE_MISMATCH', 'PAYMENT_FAILED', 'CONFLICT', 'ACCOUNT_SCHEDULED_FOR_DELETION'],
  async handler({ params, body, rc, app }) {
    const subscription = await patchSubscription(app, rc, params.user_id, params.subscription_id, {
      ...body, current_period_end: body.current_period_end ? new Date(body.current_period_end) : undefined,
    });
    return presentSubscription(rc.em, subscription);
  },
});

export const adminCancelRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id/cancel', tags, access: manage,
  summary: 'Cancel a user\'s subscription', description: 'As the subscriber\'s cancel: at the period end unless `immediate` (no refund). Audit-logged with the reason.',
  params: subscriptionParams,
  body: z.strictObject({ immediate: z.boolean().default(false), reason: reasonText().optional() }),
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    const subscription = await findUsersSubscription(rc.em, params.user_id, params.subscription_id);
    return presentSubscription(rc.em, await cancelSubscription(app, rc, subscription, body));
  },
});

export const pauseRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id/pause', tags, access: manage,
  summary: 'Pause a subscription',
  description: 'Active or trialing only (409 otherwise): status paused, billing and access suspended. With `resume_at` (future) the billing clock resumes it then; '
    + 'null pauses until resumed. The period end moves later by the paused time at resumption.',
  params: subscriptionParams,
  body: z.strictObject({ resume_at: dateTime().nullable().default(null), reason: reasonText().optional() }),
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT'],
  async handler({ params, body, rc, app }) {
    const subscription = await findUsersSubscription(rc.em, params.user_id, params.subscription_id);
    return presentSubscription(rc.em, await pauseSubscription(app, rc, subscription, { resume_at: body.resume_at ? new Date(body.resume_at) : null, reason: body.reason }));
  },
});

export const resumeRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id/resume', tags, access: manage,
  summary: 'Resume a paused subscription',
  description: 'Paused only (409 otherwise). `trialing` again when the trial had not ended, `active` otherwise; the period end moves later by the paused time. '
    + '409 ACCOUNT_SCHEDULED_FOR_DELETION while the account awaits deletion.',
  params: subscriptionParams,
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT', 'ACCOUNT_SCHEDULED_FOR_DELETION'],
  async handler({ params, rc, app }) {
    const subscription = await findUsersSubscription(rc.em, params.user_id, params.subscription_id);
    return presentSubscription(rc.em, await resumeSubscription(app, rc, subscription));
  },
});

export const reactivateRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id/reactivate', tags, access: manage,
  summary: 'Reactivate a canceled or expired subscription',
  description: 'A new period starts now on the same plan or `plan_id` (same type, on sale), charged now through `payment_method_id` (default: the one it had; null: '
    + 'complimentary). 409 for a live subscription or when another of its type is live (SUBSCRIPTION_EXISTS); 402 when the card declines (nothing changes); '
    + '409 ACCOUNT_SCHEDULED_FOR_DELETION while the account awaits deletion (its owner could neither see nor cancel it).',
  params: subscriptionParams,
  body: z.strictObject({ plan_id: uuid().optional(), payment_method_id: uuid().nullable().optional(), admin_note: note() }),
  responses: { 200: data(subscriptionResource) },
  errors: ['CONFLICT', 'PLAN_TYPE_MISMATCH', 'SUBSCRIPTION_EXISTS', 'PAYMENT_FAILED', 'ACCOUNT_SCHEDULED_FOR_DELETION'],
  async handler({ params, body, rc, app }) {
    return presentSubscription(rc.em, await reactivateSubscription(app, rc, params.user_id, params.subscription_id, body));
  },
});

export const extendRoute = defineRoute({
  method: 'post', path: '/v1/admin/users/:user_id/subscriptions/:subscription_id/extend', tags, access: manage,
  summary: 'Extend the current period',
  description: 'current_period_end (and a running trial\'s end) move later by `days` (1..365); no charge; status unchanged. Answers `{data: Subscription}`.',
  params: subscriptionParams,
  body: z.strictObject({ days: z.number().int().min(1).max(365), reason: reasonText().optional() }),
  responses: { 200: data(subscriptionResource) },
  async handler({ params, body, rc, app }) {
    const subscription = await findUsersSubscription(rc.em, params.user_id, params.subscription_id);
    return presentSubscription(rc.em, await extendSubscription(app, rc, subscription, body));
  },
});

export const adminSubscriptionRoutes = [
  listAllSubscriptionsRoute, listUserSubscriptionsRoute, assignSubscriptionRoute, readUserSubscriptionRoute, patchSubscriptionRoute,
  adminCancelRoute, pauseRoute, resumeRoute, reactivateRoute, extendRoute,
];
