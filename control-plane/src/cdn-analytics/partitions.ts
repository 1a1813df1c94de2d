// Range partitions of the analytics tables (native PostgreSQL partitioning,
// which the embedded PGlite runs too): one per day, month or year of the
// bucket (schema.ts), named <table>_p<yyyymmdd of its start>. Writers make the
// partitions their rows need before writing (remembered per process, so a
// check costs nothing once made); the retention job makes the next ones
// ahead and drops those wholly past their table's retention. Creation takes
// a transaction-scoped advisory lock so replicas do not race each other.
import type { EntityManager } from '@mikro-orm/postgresql';
import { ANALYTICS_TABLES, type PartitionPeriod } from './schema.ts';

const LOCK_KEY = 24_0045; // pg_advisory_xact_lock: partitions of the analytics tables

/** The start of the partition a time falls in. */
export function partitionStart(period: PartitionPeriod, ms: number): Date {
  const d = new Date(ms);
  if (period === 'day') return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
  if (period === 'month') return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  return new Date(Date.UTC(d.getUTCFullYear(), 0, 1));
}

export function nextPartitionStart(period: PartitionPeriod, start: Date): Date {
  const d = start;
  if (period === 'day') return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1));
  if (period === 'month') return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
  return new Date(Date.UTC(d.getUTCFullYear() + 1, 0, 1));
}

const suffix = (start: Date) => start.toISOString().slice(0, 10).replace(/-/g, '');
export const partitionName = (table: string, start: Date) => `${table}_p${suffix(start)}`;

/** Partitions known to exist in this process (table → partition names). */
const known = new Set<string>();

/** Makes the partitions of `table` that rows at these times need (each checked once per process). */
export async function ensurePartitions(em: EntityManager, table: string, times: Iterable<number>): Promise<void> {
  const { period } = ANALYTICS_TABLES[table]!;
  const missing = new Map<string, Date>();
  for (const t of times) {
    const start = partitionStart(period, t);
    const name = partitionName(table, start);
    if (!known.has(name)) missing.set(name, start);
  }
  if (!missing.size) return;
  await em.transactional(async (tem) => {
    await tem.execute(`select pg_advisory_xact_lock(${LOCK_KEY})`);
    for (const [name, start] of missing) {
      await tem.execute(`create table if not exists ${name} partition of ${table} for values from ('${start.toISOString()}') to ('${nextPartitionStart(period, start).toISOString()}')`);
    }
  });
  for (const name of missing.keys()) known.add(name);
}

/** The partitions of a table, with their starts (from their names). */
export async function partitionsOf(em: EntityManager, table: string): Promise<{ name: string; start: Date }[]> {
  const rows = await em.execute<{ name: string }[]>(
    `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid join pg_class p on p.oid = i.inhparent where p.relname = ? order by c.relname`, [table]);
  return rows.flatMap((r) => {
    const m = /_p(\d{4})(\d{2})(\d{2})$/.exec(r.name);
    return m ? [{ name: r.name, start: new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]))) }] : [];
  });
}

/**
 * Retention: makes each table's partitions for now and the next period, and drops every partition that ends
 * before now − the table's retention (rows are kept at least that long). Returns the partitions dropped.
 */
export async function maintainPartitions(em: EntityManager, now: Date): Promise<string[]> {
  const dropped: string[] = [];
  for (const [table, { period, retentionMs }] of Object.entries(ANALYTICS_TABLES)) {
    const current = partitionStart(period, now.getTime());
    await ensurePartitions(em, table, [current.getTime(), nextPartitionStart(period, current).getTime()]);
    const horizon = now.getTime() - retentionMs;
    for (const p of await partitionsOf(em, table)) {
      if (nextPartitionStart(period, p.start).getTime() > horizon) continue;
      await em.transactional(async (tem) => {
        await tem.execute(`select pg_advisory_xact_lock(${LOCK_KEY})`);
        await tem.execute(`drop table if exists ${p.name}`);
      });
      known.delete(p.name);
      dropped.push(p.name);
    }
  }
  return dropped;
}
