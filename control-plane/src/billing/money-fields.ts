// Request and record pieces for money (money.ts does the arithmetic): an
// ISO 4217 currency field, an amount field (a JSON number in major units),
// and the check that an amount fits its currency's exponent, reported on the
// amount's field (400 VALIDATION_ERROR) before anything is stored.
import { z } from 'zod';
import { amountProblem, isCurrencyCode, MAX_MINOR } from './money.ts';

const notACurrency = 'Must be an ISO 4217 currency code such as EUR';

/** ISO 4217 code; lower case is accepted and upper-cased. */
export const currencyField = () => z.string()
  .regex(/^[A-Za-z]{3}$/, notACurrency)
  .transform((v) => v.toUpperCase())
  .refine(isCurrencyCode, notACurrency)
  .describe('ISO 4217 currency code, e.g. EUR');

/** An amount as the API takes it: a JSON number in major units (9.99), never more decimals than its currency has. */
export const amountField = (description: string, options: { positive?: boolean } = {}) =>
  (options.positive ? z.number().positive('Must be above 0') : z.number().min(0, 'Must not be negative'))
  .max(MAX_MINOR, 'Too large')
  .describe(`${description} A JSON number in major units of the currency (9.99 EUR, 500 JPY, 1.25 KWD), with at most as many decimals as the currency's minor unit has (ISO 4217).`);

/** The amount a record shows: a JSON number in major units. */
export const amountRecord = () => z.number();

/**
 * Adds a VALIDATION_ERROR issue on `amountKey` when the amount has more
 * decimals than `currency` allows or is out of range (for an object schema's
 * superRefine).
 */
export function checkAmount(ctx: z.RefinementCtx, amount: number | null | undefined, currency: string | null | undefined, amountKey: string): void {
  if (amount === null || amount === undefined || !currency) return;
  const problem = amountProblem(amount, currency);
  if (problem) ctx.addIssue({ code: 'custom', path: [amountKey], message: `${problem} for ${currency}` });
}
