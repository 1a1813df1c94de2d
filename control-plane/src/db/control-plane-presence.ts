// Which control planes are connected to a PostgreSQL database, and at which
// address: each names the connections of its pool `control-plane <its URL>`
// (PostgreSQL's application_name), and PostgreSQL lists the sessions it holds
// in pg_stat_activity. A command run in a process of its own (admin:create on
// PostgreSQL) thus prints the address of the control plane actually serving
// the database, not the default of its own configuration. (On the embedded
// database a command runs inside the control plane, which knows its address.)
import type { Database } from './orm.ts';

const PREFIX = 'control-plane ';
/** PostgreSQL keeps the first 63 bytes of an application_name. */
const MAX_APPLICATION_NAME_BYTES = 63;

/** The application_name a control plane at `url` gives its connections; undefined when the name would be cut (a cut name would give a wrong address). */
export function controlPlaneApplicationName(url: string): string | undefined {
  const name = PREFIX + url;
  return Buffer.byteLength(name) <= MAX_APPLICATION_NAME_BYTES && /^[\x20-\x7e]+$/.test(name) ? name : undefined;
}

/** The addresses of the control planes connected to the database now (none on the embedded database, or when it cannot tell). */
export async function connectedControlPlanes(db: Database): Promise<string[]> {
  if (db.embedded) return [];
  try {
    const rows = await db.orm.em.fork().getConnection().execute<{ url: string }[]>(
      `select distinct substr(application_name, ?) as url from pg_stat_activity
        where datname = current_database() and starts_with(application_name, ?) order by 1`,
      [PREFIX.length + 1, PREFIX],
    );
    return rows.map((row) => row.url);
  } catch {
    return [];
  }
}
