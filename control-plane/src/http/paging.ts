// Opaque cursor paging (keyset: sort value + id), `meta` exactly as document 1
// §4.0.3 describes. The cursor is base64url JSON carrying the sort it was made
// for, so a cursor replayed with another sort is refused rather than misread.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EntityName, FilterQuery } from '@mikro-orm/core';
import { ApiError } from './errors.ts';

export interface PageMeta {
  total: number;
  count: number;
  limit: number;
  has_more: boolean;
  next_cursor: string | null;
  prev_cursor: string | null;
}

export interface Sort {
  field: string;
  direction: 'asc' | 'desc';
}

interface CursorData {
  /** sort spec, e.g. "-created_at" */
  s: string;
  /** sort value; dates as ISO strings flagged by t = "d" */
  v: string | number | boolean | null;
  t?: 'd';
  id: string;
  /** n = page after this key, p = page before it */
  d: 'n' | 'p';
}

const sortSpec = (sort: Sort) => `${sort.direction === 'desc' ? '-' : ''}${sort.field}`;

export function encodeCursor(sort: Sort, record: Record<string, unknown>, direction: 'n' | 'p', idField = 'id'): string {
  const value = record[sort.field];
  const data: CursorData = {
    s: sortSpec(sort),
    v: value instanceof Date ? value.toISOString() : (value as CursorData['v']),
    id: String(record[idField]),
    d: direction,
  };
  if (value instanceof Date) data.t = 'd';
  return Buffer.from(JSON.stringify(data)).toString('base64url');
}

const badCursor = () => new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'cursor', message: 'Invalid or expired cursor' }] });

export function decodeCursor(cursor: string, sort: Sort): { value: unknown; id: string; direction: 'n' | 'p' } {
  let data: CursorData;
  try {
    data = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw badCursor();
  }
  if (!data || typeof data !== 'object' || typeof data.id !== 'string' || (data.d !== 'n' && data.d !== 'p') || data.s !== sortSpec(sort)) {
    throw badCursor();
  }
  if (data.t === 'd') {
    const date = new Date(String(data.v));
    if (Number.isNaN(date.getTime())) throw badCursor();
    return { value: date, id: data.id, direction: data.d };
  }
  if (data.v !== null && !['string', 'number', 'boolean'].includes(typeof data.v)) throw badCursor();
  return { value: data.v, id: data.id, direction: data.d };
}

export interface PaginateOptions<T> {
  where: FilterQuery<T>;
  limit: number;
  cursor?: string;
  sort: Sort;
  idField?: string;
  populate?: readonly string[];
}

/** Reads one page of `entity`. Sort fields must be non-null columns. */
export async function paginate<T extends object>(
  em: EntityManager,
  entity: EntityName<T>,
  options: PaginateOptions<T>,
): Promise<{ items: T[]; meta: PageMeta }> {
  const { sort, limit } = options;
  const idField = options.idField ?? 'id';
  const position = options.cursor ? decodeCursor(options.cursor, sort) : undefined;
  const backwards = position?.direction === 'p';
  // Walking backwards flips both the comparison and the order; the page is reversed afterwards.
  const ascending = (sort.direction === 'asc') !== backwards;
  const op = ascending ? '$gt' : '$lt';
  const order = ascending ? 'asc' : 'desc';

  const keyset = position
    ? { $or: [{ [sort.field]: { [op]: position.value } }, { [sort.field]: position.value, [idField]: { [op]: position.id } }] }
    : undefined;
  const where = (keyset ? { $and: [options.where, keyset] } : options.where) as never;

  const [rows, total] = await Promise.all([
    em.find(entity, where, {
      orderBy: { [sort.field]: order, ...(sort.field === idField ? {} : { [idField]: order }) } as never,
      limit: limit + 1,
      populate: options.populate as never,
    }),
    em.count(entity, options.where as never),
  ]);

  const overflow = rows.length > limit;
  const items = rows.slice(0, limit);
  if (backwards) items.reverse();

  const first = items[0] as Record<string, unknown> | undefined;
  const last = items[items.length - 1] as Record<string, unknown> | undefined;
  let next: string | null;
  let prev: string | null;
  if (backwards) {
    // We came from the page after this one, so it exists.
    next = last ? encodeCursor(sort, last, 'n', idField) : options.cursor!.length ? reverseCursor(options.cursor!) : null;
    prev = overflow && first ? encodeCursor(sort, first, 'p', idField) : null;
  } else {
    next = overflow && last ? encodeCursor(sort, last, 'n', idField) : null;
    prev = position ? (first ? encodeCursor(sort, first, 'p', idField) : reverseCursor(options.cursor!)) : null;
  }
  return {
    items,
    meta: { total, count: items.length, limit, has_more: next !== null, next_cursor: next, prev_cursor: prev },
  };
}

/** Same position, other direction (for empty pages at either end). */
function reverseCursor(cursor: string): string {
  const data = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as CursorData;
  data.d = data.d === 'n' ? 'p' : 'n';
  return Buffer.from(JSON.stringify(data)).toString('base64url');
}
