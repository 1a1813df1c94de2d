// Opaque cursor paging (keyset: sort value + id), `meta` exactly as document 1
// §4.0.3 describes. The cursor is base64url JSON carrying the sort it was made
// for, so a cursor replayed with another sort is refused rather than misread.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EntityName, EntityProperty, FilterQuery } from '@mikro-orm/core';
import { z } from 'zod';
import { ApiError } from './errors.ts';
import { isStorableDate } from './schemas.ts';

export const pageMeta = z.object({
  total: z.number().int(),
  count: z.number().int(),
  limit: z.number().int(),
  has_more: z.boolean(),
  next_cursor: z.string().nullable(),
  prev_cursor: z.string().nullable(),
});
export type PageMeta = z.infer<typeof pageMeta>;

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

/** What a cursor's values must look like: the columns of the sort field and of the id. */
export interface CursorColumns {
  sort: ColumnKind;
  id: ColumnKind;
}

/** A column as far as a cursor value is concerned. */
export type ColumnKind =
  | { type: 'uuid' }
  | { type: 'string'; maxLength?: number }
  | { type: 'number' }
  | { type: 'boolean' }
  | { type: 'date' };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The kind of an entity property's column, from ORM metadata. */
export function columnKind(property: EntityProperty): ColumnKind {
  const column = String(property.columnTypes?.[0] ?? property.type).toLowerCase();
  if (column === 'uuid') return { type: 'uuid' };
  if (property.runtimeType === 'Date' || column.startsWith('timestamp') || column === 'date') return { type: 'date' };
  if (property.runtimeType === 'number' || /^(int|integer|smallint|bigint|numeric|decimal|real|double)/.test(column)) return { type: 'number' };
  if (property.runtimeType === 'boolean') return { type: 'boolean' };
  return { type: 'string', maxLength: property.length };
}

/** A cursor value the column can hold: anything else is a tampered cursor, refused before any query runs. */
function cursorValue(kind: ColumnKind, raw: unknown, isDate: boolean): unknown {
  switch (kind.type) {
    case 'uuid':
      if (typeof raw !== 'string' || !UUID.test(raw)) throw badCursor();
      return raw;
    case 'date': {
      if (!isDate || typeof raw !== 'string') throw badCursor();
      const date = new Date(raw);
      if (!isStorableDate(date)) throw badCursor();
      return date;
    }
    case 'number':
      if (typeof raw !== 'number' || !Number.isFinite(raw)) throw badCursor();
      return raw;
    case 'boolean':
      if (typeof raw !== 'boolean') throw badCursor();
      return raw;
    case 'string':
      if (typeof raw !== 'string' || (kind.maxLength !== undefined && raw.length > kind.maxLength) || raw.includes('\u0000') || !raw.isWellFormed()) throw badCursor();
      return raw;
  }
}

export function decodeCursor(cursor: string, sort: Sort, columns: CursorColumns): { value: unknown; id: unknown; direction: 'n' | 'p' } {
  let data: CursorData;
  try {
    data = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw badCursor();
  }
  if (!data || typeof data !== 'object' || Array.isArray(data) || (data.d !== 'n' && data.d !== 'p') || data.s !== sortSpec(sort)) {
    throw badCursor();
  }
  return {
    value: cursorValue(columns.sort, data.v, data.t === 'd'),
    id: cursorValue(columns.id, data.id, false),
    direction: data.d,
  };
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
  const position = options.cursor ? decodeCursor(options.cursor, sort, cursorColumns(em, entity as EntityName<object>, sort.field, idField)) : undefined;
  const backwards = position?.direction === 'p';
  // Walking backwards flips both the comparison and the order; the page is reversed afterwards.
  const ascending = (sort.direction === 'asc') !== backwards;
  const op = ascending ? '$gt' : '$lt';
  const order = ascending ? 'asc' : 'desc';

  // The leading bound (sort field >= / <= the cursor's value) is implied by the $or; stated, it lets
  // PostgreSQL start an index range at the cursor instead of filtering every row before it.
  const keyset = position
    ? {
      [sort.field]: { [`${op}e`]: position.value },
      $or: [{ [sort.field]: { [op]: position.value } }, { [sort.field]: position.value, [idField]: { [op]: position.id } }],
    }
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

const columnsCache = new WeakMap<object, Map<string, CursorColumns>>();

/** Column kinds of a sort field and id of an entity (from ORM metadata, cached). */
function cursorColumns(em: EntityManager, entity: EntityName<object>, sortField: string, idField: string): CursorColumns {
  const meta = em.getMetadata().get(entity as never);
  let byField = columnsCache.get(meta);
  if (!byField) columnsCache.set(meta, (byField = new Map()));
  let columns = byField.get(sortField);
  if (!columns) {
    const property = (name: string) => {
      const found = meta.properties[name as never] as EntityProperty | undefined;
      if (!found) throw new Error(`paginate: ${meta.className} has no property ${name}`);
      return found;
    };
    columns = { sort: columnKind(property(sortField)), id: columnKind(property(idField)) };
    byField.set(sortField, columns);
  }
  return columns;
}

/** Same position, other direction (for empty pages at either end). */
function reverseCursor(cursor: string): string {
  const data = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as CursorData;
  data.d = data.d === 'n' ? 'p' : 'n';
  return Buffer.from(JSON.stringify(data)).toString('base64url');
}
