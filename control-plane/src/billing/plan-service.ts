// Plans (document 1 §2, §3, §4.7; DESIGN.md §5): superadmin-only create,
// read, list (inactive included), full update, deactivate, and the hard
// delete of a plan nobody ever subscribed to; the public list of active plans.
//
// Grandfathering: a subscription carries the terms it was sold with (price,
// currency, cycle, max_*; billing.entities.ts), so nothing here touches a
// subscription. The billing engine copies the plan's current terms at sale and
// at each renewal, so a change reaches existing subscribers at their next
// renewal and never earlier.
//
// Every write is audit-logged with the acting superadmin, in the unit of work
// of the change.
import { ForeignKeyConstraintViolationException } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { changesOf, recordAudit } from '../audit/audit.ts';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, found } from '../http/errors.ts';
import { LIVE_SUBSCRIPTION_STATUSES, Plan, Subscription } from './billing.entities.ts';
import { toMinor } from './money.ts';
import type { CreatePlanInput, UpdatePlanInput } from './plan-record.ts';

/** The fields of a plan an update may change (everything but identity, timestamps and version). */
const PLAN_FIELDS = [
  'name', 'type', 'description', 'price_minor', 'currency', 'billing_cycle', 'max_profiles', 'max_concurrent_streams', 'max_devices',
  'max_quality', 'has_downloads', 'allow_download_count', 'has_ads', 'has_hdr', 'has_dolby_atmos', 'trial_days', 'is_active',
] as const satisfies readonly (keyof Plan)[];

type PlanValues = Pick<Plan, (typeof PLAN_FIELDS)[number]>;

const snapshot = (plan: Plan): PlanValues => Object.fromEntries(PLAN_FIELDS.map((f) => [f, plan[f]])) as PlanValues;

export async function findPlan(em: EntityManager, planId: string): Promise<Plan> {
  return found(await em.findOne(Plan, planId), 'Plan');
}

/** A plan that can be sold now: exists and is active (null otherwise). */
export async function findActivePlan(em: EntityManager, planId: string): Promise<Plan | null> {
  return em.findOne(Plan, { id: planId, is_active: true });
}

/** Subscriptions that refer to the plan: all of them (history included) and the live ones. */
export async function subscriptionsOfPlan(em: EntityManager, planId: string): Promise<{ total: number; live: number }> {
  const [total, live] = await Promise.all([
    em.count(Subscription, { plan: planId }),
    em.count(Subscription, { plan: planId, status: { $in: [...LIVE_SUBSCRIPTION_STATUSES] } }),
  ]);
  return { total, live };
}

export async function createPlan(rc: RequestContext, input: CreatePlanInput): Promise<Plan> {
  const { price, ...rest } = input;
  const plan = rc.em.create(Plan, {
    ...rest,
    description: rest.description || null,
    price_minor: toMinor(price, input.currency),
    allow_download_count: input.has_downloads ? input.allow_download_count : null,
  } as never);
  recordAudit(rc, { action: 'plan.created', resource_type: 'plan', resource_id: plan.id, changes: changesOf({}, snapshot(plan)) });
  await rc.em.flush();
  return plan;
}

/**
 * Full update (PUT). Optional fields left out keep their values; when
 * has_downloads becomes false the download count is cleared. A plan's type
 * cannot change while any subscription refers to it (a subscription's type
 * is its plan's): 409 PLAN_HAS_SUBSCRIBERS. Existing subscriptions are not
 * touched (grandfathering). The version check of the flush closes the race
 * with a concurrent update (412 with If-Match).
 */
export async function updatePlan(rc: RequestContext, planId: string, input: UpdatePlanInput): Promise<Plan> {
  const plan = await findPlan(rc.em, planId);
  const before = snapshot(plan);
  if (input.type !== plan.type) {
    const { total } = await subscriptionsOfPlan(rc.em, plan.id);
    if (total > 0) {
      throw new ApiError('PLAN_HAS_SUBSCRIBERS', `The plan's type cannot change while ${total} subscription(s) refer to it; create a plan of the other type instead`);
    }
  }
  const { price, ...rest } = input;
  for (const field of ['name', 'type', 'currency', 'billing_cycle', 'max_profiles', 'max_concurrent_streams', 'max_devices', 'max_quality', 'has_downloads', 'has_ads', 'is_active'] as const) {
    (plan as Record<string, unknown>)[field] = rest[field];
  }
  plan.price_minor = toMinor(price, input.currency);
  if (rest.description !== undefined) plan.description = rest.description || null;
  if (rest.allow_download_count !== undefined) plan.allow_download_count = rest.allow_download_count;
  if (!plan.has_downloads) plan.allow_download_count = null;
  if (rest.has_hdr !== undefined) plan.has_hdr = rest.has_hdr;
  if (rest.has_dolby_atmos !== undefined) plan.has_dolby_atmos = rest.has_dolby_atmos;
  if (rest.trial_days !== undefined) plan.trial_days = rest.trial_days;
  const changes = changesOf(before, snapshot(plan));
  if (Object.keys(changes).length === 0) return plan;
  recordAudit(rc, { action: 'plan.updated', resource_type: 'plan', resource_id: plan.id, changes });
  await rc.em.flush();
  return plan;
}

/** DELETE: is_active false (new subscriptions blocked, existing ones continue). Already inactive: unchanged. */
export async function deactivatePlan(rc: RequestContext, planId: string): Promise<Plan> {
  const plan = await findPlan(rc.em, planId);
  if (!plan.is_active) return plan;
  plan.is_active = false;
  const { live } = await subscriptionsOfPlan(rc.em, plan.id);
  recordAudit(rc, {
    action: 'plan.deactivated', resource_type: 'plan', resource_id: plan.id,
    changes: { is_active: { from: true, to: false } }, metadata: { live_subscriptions: live },
  });
  await rc.em.flush();
  return plan;
}

const hasSubscribers = (total: number, live: number) => new ApiError(
  'PLAN_HAS_SUBSCRIBERS',
  `The plan cannot be deleted: ${total} subscription(s) refer to it (${live} live). Deactivate it instead; subscriptions keep their history.`,
);

/**
 * DELETE ?hard=true: removes a plan no subscription has ever referred to (one
 * made by mistake). Any subscription, ended ones included, keeps it: 409
 * PLAN_HAS_SUBSCRIBERS. The foreign key (on delete restrict) holds the rule
 * against a subscription created meanwhile.
 */
export async function deletePlan(rc: RequestContext, planId: string): Promise<void> {
  const plan = await findPlan(rc.em, planId);
  const { total, live } = await subscriptionsOfPlan(rc.em, plan.id);
  if (total > 0) throw hasSubscribers(total, live);
  recordAudit(rc, { action: 'plan.deleted', resource_type: 'plan', resource_id: plan.id, changes: changesOf(snapshot(plan), {}, PLAN_FIELDS) });
  rc.em.remove(plan);
  try {
    await rc.em.flush();
  } catch (error) {
    if (error instanceof ForeignKeyConstraintViolationException) {
      const now = await subscriptionsOfPlan(rc.em.fork(), plan.id);
      throw hasSubscribers(now.total, now.live);
    }
    throw error;
  }
}
