// Request and record pieces the four CDN resources share (document 3 §2,
// §4.0): names, tags, list queries, the errors of the working configuration,
// and the list reader behind every top-level and distribution-scoped list.
import { raw, type EntityName } from '@mikro-orm/core';
import { z } from 'zod';
import type { RequestContext } from '../core/request-context.ts';
import { ApiError, type FieldError } from '../http/errors.ts';
import { paginate, type PageMeta } from '../http/paging.ts';
import { freeTextQuery, lineText, pageQuery, sortParam, uuid } from '../http/schemas.ts';
import { SEARCH_DOCUMENT } from './cdn.entities.ts';

export const TAGS_MAX = 50;
export const nameField = () => lineText(100);

/**
 * A field as the edge snapshot declares it (type, range; shared/src/config/snapshot.ts), without its
 * default: a create applies the snapshot's defaults, an update none. One declaration per field.
 */
export const declared = <T extends z.ZodType>(field: z.ZodDefault<T> | z.ZodOptional<T>): T => field.unwrap() as T;
export const tagsField = () => z.array(lineText(64), { message: 'Must be an array of strings' }).max(TAGS_MAX)
  .describe(`Free labels (at most ${TAGS_MAX}, each at most 64 characters), searched by q`);

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
/** An HTTP method in any case, stored upper-case. */
export const methodField = () => z.string().toUpperCase().pipe(z.enum(HTTP_METHODS));
/** One pattern of a match list (its syntax is checked by the service: a bad pattern is a 422 naming it). */
export const patternField = (max = 2048) => z.string().trim().min(1).max(max);

/** A header, cookie or query parameter name (an HTTP token). */
export const tokenField = (what: string) => z.string().max(256).regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, `Must be a ${what} name (an HTTP token)`);

export const distributionParams = z.strictObject({ id: uuid().describe('The distribution (endpoint) id') });
export const idParams = z.strictObject({ id: uuid() });

/** `q` and sort of a top-level list, beside cursor and limit and the list's filters. */
export const topLevelQuery = <F extends string, T extends z.ZodRawShape>(sortFields: readonly ['created_at', ...F[]], filters: T) =>
  pageQuery({ q: freeTextQuery().describe('Full-text search (web-search syntax: words, "a phrase", or, -word)'), sort: sortParam<'created_at' | F>(sortFields, '-created_at'), ...filters });
/** A distribution-scoped list: cursor and limit. */
export const scopedQuery = () => pageQuery({});

export const invalidConfiguration = (errors: FieldError[]) =>
  new ApiError('INVALID_CONFIGURATION', 'The change would make the CDN configuration invalid; nothing was changed', { errors });
export const resourceInUse = (message: string) => new ApiError('RESOURCE_IN_USE', message);

/** Throws 422 INVALID_CONFIGURATION when any problem was found. */
export function assertValidConfiguration(errors: FieldError[]): void {
  if (errors.length) throw invalidConfiguration(errors);
}

export interface ListOptions {
  cursor?: string;
  limit: number;
  sort: { field: string; direction: 'asc' | 'desc' };
  q?: string;
}

/**
 * One page of a CDN resource: filters, the full-text `q` over its stored search document
 * (cdn.entities.ts searchDocument; only lists of tables that have one take `q`), keyset paging.
 */
export async function listResources<T extends object>(
  rc: RequestContext,
  entity: EntityName<T>,
  where: Record<string, unknown>,
  options: ListOptions,
): Promise<{ items: T[]; meta: PageMeta }> {
  const filter: Record<string | symbol, unknown> = { ...where };
  if (options.q) filter[raw<symbol>((alias) => `${alias}.${SEARCH_DOCUMENT} @@ websearch_to_tsquery('simple', ?)`, [options.q])] = [];
  return paginate(rc.em, entity, { where: filter as never, limit: options.limit, cursor: options.cursor, sort: options.sort, misestimated: Boolean(options.q) });
}

/** The id of a reference (or null), for records that show `distribution_id`, `origin_id`. */
export const idOf = (ref: { id: string } | null | undefined): string | null => ref?.id ?? null;

/** Partial update of a nested object: sent members change, others keep their values. */
export function merged<T extends object>(current: T, patch: Partial<T> | undefined): T {
  return patch === undefined ? current : { ...current, ...patch };
}
