// Set-based statements over many rows at once (the billing clock's batches):
// the rows travel as one JSON parameter read with jsonb_to_recordset, so a
// batch is one statement whatever its size, and no statement comes near
// PostgreSQL's limit of 65,535 parameters.
import type { EntityManager } from '@mikro-orm/postgresql';

/** Column name → SQL type, in the order the rows are read. */
export type Columns = Readonly<Record<string, string>>;

/** `jsonb_to_recordset(?::jsonb) as <alias>(col type, …)`: the rows of the parameter as a relation. */
export function recordset(columns: Columns, alias = 'x'): string {
  return `jsonb_to_recordset(?::jsonb) as ${alias}(${Object.entries(columns).map(([name, type]) => `${name} ${type}`).join(', ')})`;
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
