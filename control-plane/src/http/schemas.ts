// Reusable zod pieces for request schemas, carrying the limits of document 1
// part 8. Bodies are strict objects: unknown fields are refused.
import { z } from 'zod';

export const uuid = () => z.uuid({ message: 'Must be a UUID' });

/** `true`/`false` in a query string. */
export const queryBoolean = () =>
  z.enum(['true', 'false'], { message: 'Must be true or false' }).transform((v) => v === 'true');

// PostgreSQL's timestamptz reaches from 4713 BC to 294276 AD, but ISO 8601's
// year 0000 (1 BC) and the BC/AD conversion of drivers are a trap: accept the
// years 0001..9999 that a four-digit ISO year can name, and nothing else.
// (Date.UTC maps the years 0..99 to 1900..1999: parse instead.)
const MIN_DATE_MS = Date.parse('0001-01-01T00:00:00Z') - 14 * 3600_000; // in the earliest offset
const MAX_DATE_MS = Date.parse('9999-12-31T23:59:59.999Z') + 14 * 3600_000;

/** True for a valid Date that PostgreSQL can store and return unchanged (years 0001..9999). */
export function isStorableDate(date: Date): boolean {
  const ms = date.getTime();
  return Number.isFinite(ms) && ms >= MIN_DATE_MS && ms <= MAX_DATE_MS && date.getUTCFullYear() >= 1 && date.getUTCFullYear() <= 9999;
}

/** ISO 8601 date-time with offset (UTC `Z` or `+hh:mm`), years 0001..9999. */
export const dateTime = () =>
  z.iso.datetime({ offset: true, message: 'Must be an ISO 8601 date-time' })
    .refine((v) => isStorableDate(new Date(v)), 'Must be a date-time between the years 0001 and 9999');

export const queryDateTime = () => dateTime().transform((v) => new Date(v));

/** A single line of text: trimmed, no tab or line breaks (names, reasons, notes). */
export const lineText = (max: number, min = 1) =>
  z.string().trim().min(min).max(max).regex(/^[^\t\n\r]*$/, 'Must be a single line of text');

export const limitParam = (max = 100, fallback = 20) =>
  z.coerce.number({ message: `Must be an integer between 1 and ${max}` })
    .int({ message: `Must be an integer between 1 and ${max}` })
    .min(1, { message: `Must be an integer between 1 and ${max}` })
    .max(max, { message: `Must be an integer between 1 and ${max}` })
    .default(fallback);

export const cursorParam = () => z.string().max(1024).optional();

/** `sort=field` ascending, `sort=-field` descending; only the listed fields. */
export const sortParam = <F extends string>(fields: readonly [F, ...F[]], fallback: `${'' | '-'}${F}`) =>
  z.string()
    .regex(new RegExp(`^-?(${fields.join('|')})$`), { message: `Must be one of ${fields.join(', ')}, optionally prefixed with -` })
    .default(fallback)
    .transform((value) => ({ field: value.replace(/^-/, '') as F, direction: (value.startsWith('-') ? 'desc' : 'asc') as 'asc' | 'desc' }));

/** Query of a paged list: cursor and limit plus the list's own filters. */
export const pageQuery = <T extends z.ZodRawShape>(shape: T) =>
  z.strictObject({ cursor: cursorParam(), limit: limitParam(), ...shape });

export const freeTextQuery = () => z.string().trim().max(200).optional();

export const idempotencyKeyHeader = z.string().min(1).max(255);

// ---- record pieces: a record schema is the presenter of its entity ---------
// Its input is what the service holds (Date, undefined for an unset column),
// its output the JSON the API shows; OpenAPI describes the output side.

// Timestamps come in as Date (entities) or as the database's text form (raw
// rows: `2026-11-22 18:55:01.123+00`) and always leave as ISO 8601 in UTC.
const storedTimestamp = z.union([
  z.date(),
  z.string().transform((text, ctx) => {
    const date = new Date(text);
    if (Number.isNaN(date.getTime())) {
      ctx.addIssue({ code: 'custom', message: 'Not a timestamp' });
      return z.NEVER;
    }
    return date;
  }),
]);

/** A timestamp: Date (or stored text) in, ISO 8601 string out. */
export const timestamp = () =>
  z.codec(storedTimestamp, z.iso.datetime(), { decode: (date) => date.toISOString(), encode: (iso) => new Date(iso) });

/** A timestamp that may be unset: Date, stored text, null or undefined in; ISO 8601 string or null out. */
export const timestampOrNull = () =>
  z.codec(storedTimestamp.nullish(), z.iso.datetime().nullable(), {
    decode: (value) => (value ? value.toISOString() : null),
    encode: (iso) => (iso === null ? null : new Date(iso)),
  });

/** A plain value that may be unset: null or undefined in, null out. */
export const orNull = <S extends z.ZodType<unknown, unknown>>(schema: S) =>
  z.codec(schema.nullish(), schema.nullable(), {
    decode: (value) => (value ?? null) as never,
    encode: (value) => value as never,
  });

/**
 * A request body's declared example: what /docs' "Try it out" prefills (openapi.ts puts it in the
 * operation's media type). Realistic values that the route accepts as they stand, except the ids of
 * other resources, which the caller replaces with its own (openapi-examples.test.ts sends each one).
 */
export const withExample = <S extends z.ZodType>(schema: S, example: z.input<S>): S => schema.meta({ example }) as S;
