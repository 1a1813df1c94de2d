// The Plan record of document 1 §2 and its request body. The record is the
// presenter: a route hands over the plan with its price in major units
// (presentPlan), and the router parses it through the record.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { lineText, orNull, timestamp, withExample } from '../http/schemas.ts';
import { BILLING_CYCLES, PLAN_TYPES, QUALITIES, type Plan } from './billing.entities.ts';
import { amountField, amountRecord, checkAmount, currencyField } from './money-fields.ts';
import { toMajor } from './money.ts';

export const planRecord = z.object({
  id: z.uuid(),
  name: z.string(),
  type: z.enum(PLAN_TYPES),
  description: orNull(z.string()),
  price: amountRecord().describe('In major units of the currency (9.99 EUR)'),
  currency: z.string(),
  billing_cycle: z.enum(BILLING_CYCLES),
  max_profiles: z.number().int(),
  max_concurrent_streams: z.number().int(),
  max_devices: z.number().int(),
  max_quality: z.enum(QUALITIES),
  has_downloads: z.boolean(),
  allow_download_count: orNull(z.number().int()),
  has_ads: z.boolean(),
  has_hdr: z.boolean(),
  has_dolby_atmos: z.boolean(),
  trial_days: z.number().int(),
  is_active: z.boolean(),
  created_at: timestamp(),
  updated_at: timestamp(),
});

/** Plans are versioned: single-record replies carry an ETag and PUT honours If-Match. */
export const planResource = versioned(planRecord);

/** The value a route hands over: the plan with its price as the API shows it. */
export function presentPlan(plan: Plan): Plan & { price: number } {
  // A copy, not a prototype link: objects of one shape keep the record's parse fast.
  return { ...plan, price: toMajor(plan.price_minor, plan.currency) };
}

/** Longest trial a plan may offer, in days. */
export const MAX_TRIAL_DAYS = 365;
/** Most simultaneous downloads per profile a plan may name (null: unlimited). */
export const MAX_DOWNLOAD_COUNT = 1000;

const planFields = {
  name: lineText(100),
  type: z.enum(PLAN_TYPES).describe('What the plan unlocks; a subscription holds one plan per type'),
  description: z.string().trim().max(500).nullable(),
  price: amountField('The price per billing cycle.'),
  currency: currencyField(),
  billing_cycle: z.enum(BILLING_CYCLES),
  max_profiles: z.number().int().min(1).max(6),
  max_concurrent_streams: z.number().int().min(1).max(8),
  max_devices: z.number().int().min(1).max(20),
  max_quality: z.enum(QUALITIES),
  has_downloads: z.boolean(),
  allow_download_count: z.number().int().min(0).max(MAX_DOWNLOAD_COUNT).nullable()
    .describe('Simultaneous downloads per profile; null means unlimited when has_downloads is true. Must be null (or left out) when has_downloads is false.'),
  has_ads: z.boolean(),
  has_hdr: z.boolean(),
  has_dolby_atmos: z.boolean(),
  trial_days: z.number().int().min(0).max(MAX_TRIAL_DAYS).describe('0 means no trial'),
  is_active: z.boolean(),
};

type PlanFields = { price?: number; currency?: string; has_downloads?: boolean; allow_download_count?: number | null };

function checkPlan(body: PlanFields, ctx: z.RefinementCtx): void {
  checkAmount(ctx, body.price, body.currency, 'price');
  if (body.has_downloads === false && body.allow_download_count !== null && body.allow_download_count !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['allow_download_count'], message: 'Must be null when has_downloads is false' });
  }
}

/** Create: the Plan table's required fields; description, allow_download_count, has_hdr, has_dolby_atmos and trial_days are optional. */
const planExample = {
  name: 'Standard', type: 'svod', description: 'Full HD on two screens at once, with downloads', price: 9.99, currency: 'EUR', billing_cycle: 'monthly',
  max_profiles: 5, max_concurrent_streams: 2, max_devices: 6, max_quality: 'FHD', has_downloads: true, allow_download_count: 25,
  has_ads: false, has_hdr: false, has_dolby_atmos: false, trial_days: 7, is_active: true,
} as const;

export const createPlanBody = withExample(z.strictObject({
  ...planFields,
  description: planFields.description.default(null),
  allow_download_count: planFields.allow_download_count.default(null),
  has_hdr: planFields.has_hdr.default(false),
  has_dolby_atmos: planFields.has_dolby_atmos.default(false),
  trial_days: planFields.trial_days.default(0),
}).superRefine(checkPlan), planExample);
export type CreatePlanInput = z.output<typeof createPlanBody>;

/** Update (PUT): the same required fields; optional ones left out keep their stored values, null clears a nullable one. */
export const updatePlanBody = withExample(z.strictObject({
  ...planFields,
  description: planFields.description.optional(),
  allow_download_count: planFields.allow_download_count.optional(),
  has_hdr: planFields.has_hdr.optional(),
  has_dolby_atmos: planFields.has_dolby_atmos.optional(),
  trial_days: planFields.trial_days.optional(),
}).superRefine(checkPlan), { ...planExample, price: 10.99 });
export type UpdatePlanInput = z.output<typeof updatePlanBody>;
