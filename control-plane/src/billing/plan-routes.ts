// Plans (document 1 §4.7; DESIGN.md §5, §6): the public list of active plans,
// and the superadmin's list, create, read, update (If-Match), deactivate and
// hard delete.
import { z } from 'zod';
import { paginate, type PageMeta } from '../http/paging.ts';
import { data, empty, page, reply } from '../http/route.ts';
import { pageQuery, queryBoolean, sortParam, uuid } from '../http/schemas.ts';
import { PLAN_TYPES, Plan } from './billing.entities.ts';
import { currencyField } from './money-fields.ts';
import { createPlanBody, planRecord, planResource, presentPlan, updatePlanBody } from './plan-record.ts';
import { createPlan, deactivatePlan, deletePlan, findPlan, updatePlan } from './plan-service.ts';
import { defineBillingRoute as defineRoute } from './services.ts';

const adminTags = ['Administration: plans'];
const manage = { permission: 'plans.manage' } as const;
const planParams = z.strictObject({ plan_id: uuid() });

/** `sort=price` pages over the stored minor units (plans of one currency compare by price). */
const planSort = (fallback: 'price' | '-created_at') =>
  sortParam(['price', 'created_at', 'name'], fallback).transform((s) => ({ ...s, field: s.field === 'price' ? 'price_minor' : s.field }));

const presentPage = (found: { items: Plan[]; meta: PageMeta }) =>
  ({ items: found.items.map(presentPlan), meta: found.meta });

export const listActivePlansRoute = defineRoute({
  method: 'get', path: '/v1/plans', tags: ['Plans'], access: 'public',
  summary: 'List the plans on sale',
  description: 'Active plans only (no authentication needed), cheapest first by default. Prices are JSON numbers in major units of each plan\'s currency.',
  query: pageQuery({
    type: z.enum(PLAN_TYPES).optional(),
    currency: currencyField().optional(),
    sort: planSort('price'),
  }),
  responses: { 200: page(planRecord) },
  async handler({ query, rc }) {
    const where: Record<string, unknown> = { is_active: true };
    if (query.type) where.type = query.type;
    if (query.currency) where.currency = query.currency;
    return presentPage(await paginate(rc.em, Plan, { where, limit: query.limit, cursor: query.cursor, sort: query.sort }));
  },
});

export const listPlansRoute = defineRoute({
  method: 'get', path: '/v1/admin/plans', tags: adminTags, access: manage,
  summary: 'List all plans',
  description: 'Inactive plans included (filter with is_active); newest first by default. Superadmin only.',
  query: pageQuery({
    type: z.enum(PLAN_TYPES).optional(),
    is_active: queryBoolean().optional(),
    currency: currencyField().optional(),
    sort: planSort('-created_at'),
  }),
  responses: { 200: page(planRecord) },
  async handler({ query, rc }) {
    const where: Record<string, unknown> = {};
    if (query.type) where.type = query.type;
    if (query.is_active !== undefined) where.is_active = query.is_active;
    if (query.currency) where.currency = query.currency;
    return presentPage(await paginate(rc.em, Plan, { where, limit: query.limit, cursor: query.cursor, sort: query.sort }));
  },
});

export const createPlanRoute = defineRoute({
  method: 'post', path: '/v1/admin/plans', tags: adminTags, access: manage,
  summary: 'Create a plan',
  description: 'Fields per the Plan record; trial_days defaults to 0, has_hdr and has_dolby_atmos to false. `price` is a JSON number in major units '
    + 'with at most as many decimals as the currency has (ISO 4217: 9.99 EUR, 500 JPY, 1.125 KWD). Audit-logged. Superadmin only.',
  body: createPlanBody,
  responses: { 201: data(planResource) },
  async handler({ body, rc }) {
    const plan = await createPlan(rc, body);
    return reply.created(presentPlan(plan), `/v1/admin/plans/${plan.id}`);
  },
});

export const readPlanRoute = defineRoute({
  method: 'get', path: '/v1/admin/plans/:plan_id', tags: adminTags, access: manage,
  summary: 'Read a plan', description: 'Active or not. Superadmin only.',
  params: planParams,
  responses: { 200: data(planResource) },
  async handler({ params, rc }) {
    return presentPlan(await findPlan(rc.em, params.plan_id));
  },
});

export const updatePlanRoute = defineRoute({
  method: 'put', path: '/v1/admin/plans/:plan_id', tags: adminTags, access: manage,
  summary: 'Update a plan',
  description: 'The full body, with the same required fields as create; optional fields left out keep their stored values, null clears a nullable one. '
    + 'With If-Match, a stale ETag is a 412 and nothing changes. Grandfathering: existing subscriptions keep the price, cycle and limits they were sold with '
    + 'until their next renewal; this update does not touch them. The type cannot change while subscriptions refer to the plan (409 PLAN_HAS_SUBSCRIBERS). '
    + 'Audit-logged with the changed fields. Superadmin only.',
  params: planParams,
  body: updatePlanBody,
  ifMatch: ({ params, rc }) => findPlan(rc.em, params.plan_id),
  responses: { 200: data(planResource) },
  errors: ['PLAN_HAS_SUBSCRIBERS'],
  async handler({ params, body, rc }) {
    return presentPlan(await updatePlan(rc, params.plan_id, body));
  },
});

export const deletePlanRoute = defineRoute({
  method: 'delete', path: '/v1/admin/plans/:plan_id', tags: adminTags, access: manage,
  summary: 'Deactivate a plan (or delete one nobody subscribed to)',
  description: 'Sets is_active false and answers the plan: no new subscriptions, existing ones continue until canceled or expired. Audit-logged. '
    + 'With `hard=true` the plan is deleted for good (204), only while no subscription, live or ended, refers to it; '
    + 'otherwise 409 PLAN_HAS_SUBSCRIBERS and nothing changes. Superadmin only.',
  params: planParams,
  query: z.strictObject({ hard: queryBoolean().default(false).describe('Delete for good instead of deactivating') }),
  responses: { 200: data(planResource), 204: empty },
  errors: ['PLAN_HAS_SUBSCRIBERS'],
  async handler({ params, query, rc }) {
    if (query.hard) {
      await deletePlan(rc, params.plan_id);
      return reply.noContent();
    }
    return presentPlan(await deactivatePlan(rc, params.plan_id));
  },
});

export const planRoutes = [listActivePlansRoute, listPlansRoute, createPlanRoute, readPlanRoute, updatePlanRoute, deletePlanRoute];
