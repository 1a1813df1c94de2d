// Reusable zod pieces for request schemas, carrying the limits of document 1
// part 8. Bodies are strict objects: unknown fields are refused.
import { z } from 'zod';

export const uuid = () => z.uuid({ message: 'Must be a UUID' });

/** `true`/`false` in a query string. */
export const queryBoolean = () =>
  z.enum(['true', 'false'], { message: 'Must be true or false' }).transform((v) => v === 'true');

/** ISO 8601 date-time with offset (UTC `Z` or `+hh:mm`). */
export const dateTime = () => z.iso.datetime({ offset: true, message: 'Must be an ISO 8601 date-time' });

export const queryDateTime = () => dateTime().transform((v) => new Date(v));

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
