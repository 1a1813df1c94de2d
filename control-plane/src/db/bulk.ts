// Set-based statements over many rows at once (the billing clock's batches):
// the rows travel as one JSON parameter read with jsonb_to_recordset, so a
// batch is one statement whatever its size, and no statement comes near
// PostgreSQL's limit of 65,535 parameters.
import type { EntityManager } from '@mikro-orm/postgresql';
import { CompiledQuery, type Kysely } from 'kysely';

/** Column name → SQL type, in the order the rows are read. */
export type Columns = Readonly<Record<string, string>>;

/** `jsonb_to_recordset(?::jsonb) as <alias>(col type, …)`: the rows of the parameter as a relation (`parameter`: `$2` etc. for executeBound). */
export function recordset(columns: Columns, alias = 'x', parameter = '?'): string {
  return `jsonb_to_recordset(${parameter}::jsonb) as ${alias}(${Object.entries(columns).map(([name, type]) => `${name} ${type}`).join(', ')})`;
}

/** Inserts the rows (objects keyed by column) in one statement. */
export async function insertRows(em: EntityManager, table: string, columns: Columns, rows: readonly Record<string, unknown>[]): Promise<void> {
  if (!rows.length) return;
  const names = Object.keys(columns).join(', ');
  await em.execute(`insert into ${table} (${names}) select ${names} from ${recordset(columns)}`, [JSON.stringify(rows)]);
}

/** A list of ids as one parameter: `id = any(${idList})` with the list JSON-encoded (ids(…)). */
export const idList = `array(select jsonb_array_elements_text(?::jsonb)::uuid)`;
export const ids = (values: readonly string[]): string => JSON.stringify(values);

/**
 * Runs a statement with its parameters bound ($1, $2, … in `sql`) rather than spliced into its text, as
 * em.execute does: for the statements that carry a large JSON parameter many times a second (the control
 * channel's flushes of acknowledgements and heartbeats). Spliced, a thousand acks make a 45 KB statement
 * that is escaped, flattened and copied on the way out and parsed again by PostgreSQL; bound, the JSON goes
 * as it is. Runs in the entity manager's transaction when it has one.
 */
export async function executeBound<T = Record<string, unknown>>(em: EntityManager, sql: string, params: readonly unknown[]): Promise<T[]> {
  const client = (em.getTransactionContext() ?? em.getConnection().getClient()) as Pick<Kysely<unknown>, 'executeQuery'>;
  const result = await client.executeQuery<T>(CompiledQuery.raw(sql, [...params]));
  return result.rows as T[];
}
