// Opaque cursor paging (keyset: sort value + id), `meta` exactly as document 1
// §4.0.3 describes. The cursor is base64url JSON carrying the sort it was made
// for, so a cursor replayed with another sort is refused rather than misread.
// `meta.total` is exact up to TOTAL_EXACT_UP_TO matching rows and PostgreSQL's
// estimate beyond (docs/decisions.md, "Totals and search of the CDN lists at size").
import type { EntityManager } from '@mikro-orm/postgresql';
import { raw, type EntityName, type EntityProperty, type FilterQuery } from '@mikro-orm/core';
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

/** The column names of a sort field and of the id (for the keyset's row comparison). */
interface KeysetColumns extends CursorColumns {
  sortColumn: string;
  idColumn: string;
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
  /**
   * The filter is one PostgreSQL may overestimate badly — full-text `q`: a word outside the column's
   * statistics is taken to match 0.5% of the rows — and then walk the whole sort index looking for a
   * page of rows that are not there. With this set, the exact count comes first, and when at most
   * TOTAL_EXACT_UP_TO rows match, the page is picked among them (read through the filter's own
   * index, then sorted) instead; over that, rows are common enough for the walk to find a page soon.
   */
  misestimated?: boolean;
}

/**
 * `meta.total` is an exact count while at most this many rows match. Beyond
 * it, counting every row would cost time in proportion to the table (a
 * million-entry audit log: hundreds of milliseconds a page), so total is then
 * PostgreSQL's estimate of the matching rows, never below this + 1: a total
 * above 1,000 reads "more than 1,000, about this many".
 */
export const TOTAL_EXACT_UP_TO = 1000;

/** Reads one page of `entity`. Sort fields must be non-null columns. */
export async function paginate<T extends object>(
  em: EntityManager,
  entity: EntityName<T>,
  options: PaginateOptions<T>,
): Promise<{ items: T[]; meta: PageMeta }> {
  const { sort, limit } = options;
  const idField = options.idField ?? 'id';
  const columns = keysetColumns(em, entity as EntityName<object>, sort.field, idField);
  const position = options.cursor ? decodeCursor(options.cursor, sort, columns) : undefined;
  const backwards = position?.direction === 'p';
  // Walking backwards flips both the comparison and the order; the page is reversed afterwards.
  const ascending = (sort.direction === 'asc') !== backwards;
  const order = ascending ? 'asc' : 'desc';

  // The keyset as one row comparison, (sort field, id) > (value, id) — the same rows as
  // `field > value or (field = value and id > cursor id)`, but an index on (field, id) starts
  // its range exactly at the cursor, even inside a long run of equal sort values.
  const keyset = position
    ? { [raw<symbol>((alias) => `(${quote(em, `${alias}.${columns.sortColumn}`)}, ${quote(em, `${alias}.${columns.idColumn}`)}) ${ascending ? '>' : '<'} (?, ?)`, [position.value, position.id])]: [] }
    : undefined;
  const where = (keyset ? { $and: [options.where, keyset] } : options.where) as never;

  const orderBy = { [sort.field]: order, ...(sort.field === idField ? {} : { [idField]: order }) } as never;
  const walk = () => em.find(entity, where, { orderBy, limit: limit + 1, populate: options.populate as never });
  let rows: T[];
  let total: number;
  if (options.misestimated) {
    const counted = await countUpTo(em, entity, options.where);
    if (counted <= TOTAL_EXACT_UP_TO) {
      total = counted;
      rows = await pickAmongMatches(em, entity, where, { ...columns, idField, sortField: sort.field, order, orderBy, take: limit + 1, populate: options.populate });
    } else {
      [rows, total] = await Promise.all([walk(), estimateTotal(em, entity, options.where)]);
    }
  } else {
    [rows, total] = await Promise.all([walk(), countTotal(em, entity, options.where)]);
  }

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

/**
 * The rows matching `where`: counted exactly up to TOTAL_EXACT_UP_TO (a count over a
 * `limit TOTAL_EXACT_UP_TO + 1` subquery reads at most that many rows), else the
 * planner's estimate for the same statement (no rows read), at least TOTAL_EXACT_UP_TO + 1.
 */
export async function countTotal<T extends object>(em: EntityManager, entity: EntityName<T>, where: FilterQuery<T>): Promise<number> {
  const counted = await countUpTo(em, entity, where);
  return counted <= TOTAL_EXACT_UP_TO ? counted : estimateTotal(em, entity, where);
}

const matching = <T extends object>(em: EntityManager, entity: EntityName<T>, where: FilterQuery<T>) =>
  em.createQueryBuilder(entity).select(raw('1')).where(where as never).toQuery();

/** The matching rows, counted up to TOTAL_EXACT_UP_TO + 1. */
async function countUpTo<T extends object>(em: EntityManager, entity: EntityName<T>, where: FilterQuery<T>): Promise<number> {
  const { sql, params } = matching(em, entity, where);
  const [{ n }] = await em.execute<{ n: number }[]>(`select count(*)::int as n from (${sql} limit ${TOTAL_EXACT_UP_TO + 1}) as matching`, [...params]);
  return n;
}

/** The planner's estimate of the matching rows, at least TOTAL_EXACT_UP_TO + 1 (for when that many were counted). */
async function estimateTotal<T extends object>(em: EntityManager, entity: EntityName<T>, where: FilterQuery<T>): Promise<number> {
  const { sql, params } = matching(em, entity, where);
  const [explained] = await em.execute<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }[]>(`explain (format json) ${sql}`, [...params]);
  return Math.max(TOTAL_EXACT_UP_TO + 1, Math.round(explained!['QUERY PLAN'][0].Plan['Plan Rows']));
}

/**
 * The first `take` rows matching `where` in the page's order, found among the matching rows:
 * their ids and sort keys come from a subquery fenced with `offset 0` (planned on its own, so
 * through the filter's index, never by walking the sort order), then the entities by id.
 */
async function pickAmongMatches<T extends object>(
  em: EntityManager,
  entity: EntityName<T>,
  where: FilterQuery<T>,
  page: KeysetColumns & { idField: string; sortField: string; order: 'asc' | 'desc'; orderBy: never; take: number; populate?: readonly string[] },
): Promise<T[]> {
  const fields = page.sortField === page.idField ? [page.idField] : [page.sortField, page.idField];
  const { sql, params } = em.createQueryBuilder(entity).select(fields as never).where(where as never).toQuery();
  const order = [page.sortColumn, page.idColumn].filter((c, i, all) => all.indexOf(c) === i).map((c) => `${quote(em, c)} ${page.order}`).join(', ');
  const ids = await em.execute<{ id: unknown }[]>(
    `select ${quote(em, page.idColumn)} as id from (${sql} offset 0) as matching order by ${order} limit ${page.take}`, [...params]);
  if (!ids.length) return [];
  return em.find(entity, { [page.idField]: { $in: ids.map((row) => row.id) } } as never, { orderBy: page.orderBy, populate: page.populate as never });
}

const quote = (em: EntityManager, identifier: string) => em.getPlatform().quoteIdentifier(identifier);

const columnsCache = new WeakMap<object, Map<string, KeysetColumns>>();

/** Column kinds and names of a sort field and id of an entity (from ORM metadata, cached). */
function keysetColumns(em: EntityManager, entity: EntityName<object>, sortField: string, idField: string): KeysetColumns {
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
    const sort = property(sortField);
    const id = property(idField);
    columns = { sort: columnKind(sort), id: columnKind(id), sortColumn: sort.fieldNames[0]!, idColumn: id.fieldNames[0]! };
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
