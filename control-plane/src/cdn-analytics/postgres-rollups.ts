// The rollup store on PostgreSQL (rollup-store.ts; tables of migration 0045).
//
// Writes: a report is stored once (its id goes in cdn_traffic_receipt in the
// same transaction as its rows: a report sent again after a reconnect or to
// another replica adds nothing). Its minutes are added to the rows of their
// (minute, endpoint, origin, cache rule) and to the platform-wide row of the
// minute, so rows grow with endpoints and time, never with nodes; its URLs and
// countries are added to their hour (endpoint scope and platform scope). The
// hours and days written are marked dirty.
//
// Roll-ups: a job recomputes each dirty hour from its minutes and each dirty
// day from its hours (a recomputation, so late minutes simply mark their hour
// dirty again), and prunes a finished hour's URLs to the top 500 per endpoint
// and 1,000 platform-wide.
//
// Reads are exact whatever the job's progress: a range is cut into whole days
// (day rows), whole hours (hour rows) and the rest (minute rows), and a day or
// hour still marked dirty is read from the finer rows instead.
import type { EntityManager } from '@mikro-orm/postgresql';
import { DAY, HOUR } from '../core/clock.ts';
import { executeBound, recordset } from '../db/bulk.ts';
import { ensurePartitions, maintainPartitions } from './partitions.ts';
import type { CounterScope, CounterTotals, CountryCounts, RollupStore, TimeRange, TrafficReportInput, UrlCounts } from './rollup-store.ts';
import { CACHE_STATUS_COLUMNS, COUNTER_COLUMNS, NIL, RECEIPT_RETENTION_MS, RT_COLUMNS, URL_COLUMNS } from './schema.ts';

/** URLs kept per endpoint and per finished hour or day, and platform-wide. */
export const URLS_PER_ENDPOINT = 500;
export const URLS_PLATFORM = 1_000;
/** Dirty buckets recomputed per job run and granularity (the rest wait for the next run). */
const ROLLUP_BATCH = 200;

const floorTo = (ms: number, step: number) => ms - (ms % step);
const iso = (ms: number) => new Date(ms).toISOString();
const sumList = (columns: readonly string[], prefix = '') => columns.map((c) => `sum(${prefix}${c})${c === 'rt_sum_ms' ? '' : '::bigint'} as ${c}`).join(', ');
const addList = (columns: readonly string[], table: string) => columns.map((c) => `${c} = ${table}.${c} + excluded.${c}`).join(', ');

const COUNTER_TYPES = Object.fromEntries(COUNTER_COLUMNS.map((c) => [c, c === 'rt_sum_ms' ? 'float8' : 'bigint']));
const URL_TYPES = Object.fromEntries(URL_COLUMNS.map((c) => [c, 'bigint']));

function scopeSql(scope: CounterScope): { where: string; params: unknown[] } {
  switch (scope.kind) {
    case 'platform': return { where: `endpoint_id = '${NIL}'`, params: [] };
    case 'endpoint': return { where: 'endpoint_id = ?', params: [scope.id] };
    case 'origin': return { where: 'origin_id = ?', params: [scope.id] };
    case 'cache_rule': return { where: 'cache_rule_id = ?', params: [scope.id] };
  }
}

interface Piece { table: 'minute' | 'hour' | 'day'; from: number; to: number }

/**
 * The range as whole days, whole hours and minutes, coarsest first, finer where a bucket is still dirty
 * (`days`: whether day rows may be used).
 */
export function planRange(range: TimeRange, dirtyHours: ReadonlySet<number>, dirtyDays: ReadonlySet<number>, days = true): Piece[] {
  const out: Piece[] = [];
  const push = (table: Piece['table'], from: number, to: number) => {
    const last = out.at(-1);
    if (last && last.table === table && last.to === from) last.to = to;
    else out.push({ table, from, to });
  };
  let t = range.from;
  while (t < range.to) {
    if (days && t % DAY === 0 && t + DAY <= range.to && !dirtyDays.has(t)) {
      push('day', t, t + DAY);
      t += DAY;
    } else if (t % HOUR === 0 && t + HOUR <= range.to && !dirtyHours.has(t)) {
      push('hour', t, t + HOUR);
      t += HOUR;
    } else {
      const end = Math.min(range.to, floorTo(t, HOUR) + HOUR);
      push('minute', t, end);
      t = end;
    }
  }
  return out;
}

function emptyTotals(): CounterTotals {
  return {
    requests: 0, s2xx: 0, s3xx: 0, s4xx: 0, s5xx: 0, statuses: Object.fromEntries(CACHE_STATUS_COLUMNS.map((c) => [c, 0])) as CounterTotals['statuses'],
    bytes_from_cache: 0, bytes_from_origin: 0, rt: RT_COLUMNS.map(() => 0), rt_sum_ms: 0,
  };
}

function urlStatuses(row: Record<string, unknown>): UrlCounts['statuses'] {
  return Object.fromEntries(CACHE_STATUS_COLUMNS.map((c) => [c, Number(row[c] ?? 0)])) as UrlCounts['statuses'];
}

export class PostgresRollupStore implements RollupStore {
  async ingest(em: EntityManager, reports: readonly TrafficReportInput[], now: Date): Promise<{ confirmed: string[]; fresh: number; rollups: number }> {
    if (!reports.length) return { confirmed: [], fresh: 0, rollups: 0 };
    let freshCount = 0;
    let rollupCount = 0;
    const minutes = new Set<number>();
    const hours = new Set<number>();
    for (const r of reports) for (const x of r.rollups) {
      minutes.add(x.minute);
      hours.add(floorTo(x.minute, HOUR));
    }
    await ensurePartitions(em, 'cdn_traffic_minute', minutes);
    await ensurePartitions(em, 'cdn_traffic_url_hour', hours);
    await ensurePartitions(em, 'cdn_traffic_country_hour', hours);
    await em.transactional(async (tem) => {
      const fresh = new Set((await executeBound<{ report_id: string }>(tem,
        `insert into cdn_traffic_receipt (report_id, node_id, received_at)
         select x.report_id, x.node_id, $2 from ${recordset({ report_id: 'uuid', node_id: 'uuid' }, 'x', '$1')}
         on conflict (report_id) do nothing returning report_id`,
        [JSON.stringify(reports.map((r) => ({ report_id: r.report_id, node_id: r.node_id }))), now])).map((r) => r.report_id));
      const rollups = reports.filter((r) => fresh.has(r.report_id)).flatMap((r) => r.rollups);
      freshCount = fresh.size;
      rollupCount = rollups.length;
      if (!rollups.length) return;
      const slices: Record<string, unknown>[] = [];
      const urls: Record<string, unknown>[] = [];
      const countries: Record<string, unknown>[] = [];
      for (const x of rollups) {
        const bucket = iso(x.minute);
        const hour = iso(floorTo(x.minute, HOUR));
        for (const s of x.slices) {
          const row: Record<string, unknown> = {
            bucket, endpoint_id: x.endpoint_id, origin_id: s.origin_id || NIL, cache_rule_id: s.cache_rule_id || NIL,
            requests: s.requests, s2xx: s.s2xx, s3xx: s.s3xx, s4xx: s.s4xx, s5xx: s.s5xx, ...s.statuses,
            bytes_from_cache: s.bytes_from_cache, bytes_from_origin: s.bytes_from_origin, rt_sum_ms: s.rt_sum_ms,
          };
          RT_COLUMNS.forEach((c, i) => (row[c] = s.rt[i] ?? 0));
          slices.push(row);
        }
        for (const u of x.urls) urls.push({ bucket: hour, endpoint_id: x.endpoint_id, url: u.url, requests: u.requests, bytes: u.bytes, cache_hits: u.cache_hits, ...u.statuses });
        for (const c of x.countries) countries.push({ bucket: hour, endpoint_id: x.endpoint_id, country: c.country, requests: c.requests, bytes: c.bytes, errors: c.errors });
      }
      if (slices.length) {
        const cols = COUNTER_COLUMNS.join(', ');
        await executeBound(tem,
          `with x as (select * from ${recordset({ bucket: 'timestamptz', endpoint_id: 'uuid', origin_id: 'uuid', cache_rule_id: 'uuid', ...COUNTER_TYPES }, 'r', '$1')})
           insert into cdn_traffic_minute as t (bucket, endpoint_id, origin_id, cache_rule_id, ${cols})
           select bucket, endpoint_id, origin_id, cache_rule_id, ${sumList(COUNTER_COLUMNS)} from x group by 1, 2, 3, 4
           union all
           select bucket, '${NIL}', '${NIL}', '${NIL}', ${sumList(COUNTER_COLUMNS)} from x group by 1
           on conflict (bucket, endpoint_id, origin_id, cache_rule_id) do update set ${addList(COUNTER_COLUMNS, 't')}`,
          [JSON.stringify(slices)]);
      }
      if (urls.length) {
        const cols = URL_COLUMNS.join(', ');
        await executeBound(tem,
          `with x as (select * from ${recordset({ bucket: 'timestamptz', endpoint_id: 'uuid', url: 'text', ...URL_TYPES }, 'r', '$1')})
           insert into cdn_traffic_url_hour as t (bucket, scope, endpoint_id, url, ${cols})
           select bucket, s.scope, endpoint_id, url, ${sumList(URL_COLUMNS)} from x cross join (values ('endpoint'), ('platform')) as s(scope) group by 1, 2, 3, 4
           on conflict (bucket, scope, endpoint_id, url) do update set ${addList(URL_COLUMNS, 't')}`,
          [JSON.stringify(urls)]);
      }
      if (countries.length) {
        await executeBound(tem,
          `with x as (select * from ${recordset({ bucket: 'timestamptz', endpoint_id: 'uuid', country: 'text', requests: 'bigint', bytes: 'bigint', errors: 'bigint' }, 'r', '$1')})
           insert into cdn_traffic_country_hour as t (bucket, endpoint_id, country, requests, bytes, errors)
           select bucket, endpoint_id, country, sum(requests), sum(bytes), sum(errors) from x group by 1, 2, 3
           union all
           select bucket, '${NIL}', country, sum(requests), sum(bytes), sum(errors) from x group by 1, 3
           on conflict (bucket, endpoint_id, country) do update set requests = t.requests + excluded.requests, bytes = t.bytes + excluded.bytes, errors = t.errors + excluded.errors`,
          [JSON.stringify(countries)]);
      }
      const marks = [...new Set(rollups.map((x) => floorTo(x.minute, HOUR)))].flatMap((h) => [{ granularity: 'hour', bucket: iso(h) }, { granularity: 'day', bucket: iso(floorTo(h, DAY)) }]);
      await executeBound(tem,
        `insert into cdn_traffic_dirty (granularity, bucket) select distinct granularity, bucket from ${recordset({ granularity: 'text', bucket: 'timestamptz' }, 'x', '$1')}
         on conflict do nothing`, [JSON.stringify(marks)]);
    });
    return { confirmed: reports.map((r) => r.report_id), fresh: freshCount, rollups: rollupCount };
  }

  async #dirty(em: EntityManager, range: TimeRange): Promise<{ hours: Set<number>; days: Set<number> }> {
    const rows = await em.execute<{ granularity: string; bucket: Date }[]>(
      `select granularity, bucket from cdn_traffic_dirty where bucket >= ? and bucket < ?`, [new Date(floorTo(range.from, DAY)), new Date(range.to)]);
    const hours = new Set<number>();
    const days = new Set<number>();
    for (const r of rows) (r.granularity === 'hour' ? hours : days).add(new Date(r.bucket).getTime());
    return { hours, days };
  }

  /** A union of the range's pieces, each filtered by `where` (its parameters repeated per piece). */
  async #pieces(em: EntityManager, range: TimeRange, where: string, params: unknown[], columns: string, days = true): Promise<{ sql: string; params: unknown[] }> {
    const dirty = await this.#dirty(em, range);
    const pieces = planRange(range, dirty.hours, dirty.days, days);
    const parts: string[] = [];
    const all: unknown[] = [];
    for (const p of pieces) {
      parts.push(`select ${columns} from cdn_traffic_${p.table} where bucket >= ? and bucket < ? and ${where}`);
      all.push(new Date(p.from), new Date(p.to), ...params);
    }
    if (!parts.length) parts.push(`select ${columns} from cdn_traffic_minute where false`);
    return { sql: parts.join(' union all '), params: all };
  }

  async totals(em: EntityManager, range: TimeRange, scope: CounterScope): Promise<CounterTotals> {
    const s = scopeSql(scope);
    const union = await this.#pieces(em, range, s.where, s.params, COUNTER_COLUMNS.join(', '));
    const [row] = await em.execute<Record<string, unknown>[]>(`select ${sumList(COUNTER_COLUMNS)} from (${union.sql}) x`, union.params);
    const out = emptyTotals();
    if (!row || row.requests === null) return out;
    const n = (c: string) => Number(row[c] ?? 0);
    out.requests = n('requests');
    out.s2xx = n('s2xx');
    out.s3xx = n('s3xx');
    out.s4xx = n('s4xx');
    out.s5xx = n('s5xx');
    for (const c of CACHE_STATUS_COLUMNS) out.statuses[c] = n(c);
    out.bytes_from_cache = n('bytes_from_cache');
    out.bytes_from_origin = n('bytes_from_origin');
    out.rt = RT_COLUMNS.map(n);
    out.rt_sum_ms = n('rt_sum_ms');
    return out;
  }

  async series(em: EntityManager, range: TimeRange, stepMs: number, scope: CounterScope) {
    const s = scopeSql(scope);
    const union = await this.#pieces(em, range, s.where, s.params, 'bucket, bytes_from_cache, bytes_from_origin', stepMs >= DAY);
    const rows = await em.execute<{ b: Date; c: string; o: string }[]>(
      `select date_bin(?::interval, bucket, timestamptz '1970-01-01') as b, sum(bytes_from_cache)::bigint as c, sum(bytes_from_origin)::bigint as o
       from (${union.sql}) x group by 1 order by 1`, [`${stepMs / 1000} seconds`, ...union.params]);
    return rows.map((r) => ({ bucket: new Date(r.b).getTime(), bytes_from_cache: Number(r.c), bytes_from_origin: Number(r.o) }));
  }

  async topUrls(em: EntityManager, range: TimeRange, endpointId: string | null, rankedBy: 'requests' | 'bytes', limit: number) {
    const hours = { from: floorTo(range.from, HOUR), to: range.to };
    const dirty = await this.#dirty(em, hours);
    const parts: string[] = [];
    const params: unknown[] = [];
    const where = endpointId === null ? `scope = 'platform'` : `scope = 'endpoint' and endpoint_id = ?`;
    for (const p of planRange(hours, new Set(), dirty.days)) {
      // URLs have no minute rows: an hour is read whole from its hour rows.
      const table = p.table === 'day' ? 'cdn_traffic_url_day' : 'cdn_traffic_url_hour';
      parts.push(`select endpoint_id, url, ${URL_COLUMNS.join(', ')} from ${table} where bucket >= ? and bucket < ? and ${where}`);
      params.push(new Date(floorTo(p.from, HOUR)), new Date(p.to), ...(endpointId === null ? [] : [endpointId]));
    }
    if (!parts.length) return [];
    const rows = await em.execute<Record<string, unknown>[]>(
      `select endpoint_id, url, ${sumList(URL_COLUMNS)} from (${parts.join(' union all ')}) x group by endpoint_id, url
       order by sum(${rankedBy}) desc, url limit ?`, [...params, limit]);
    return rows.map((r) => ({
      endpoint_id: String(r.endpoint_id), url: String(r.url), requests: Number(r.requests), bytes: Number(r.bytes), cache_hits: Number(r.cache_hits), statuses: urlStatuses(r),
    }));
  }

  async countries(em: EntityManager, range: TimeRange, endpointId: string | null): Promise<CountryCounts[]> {
    const hours = { from: floorTo(range.from, HOUR), to: range.to };
    const dirty = await this.#dirty(em, hours);
    const parts: string[] = [];
    const params: unknown[] = [];
    for (const p of planRange(hours, new Set(), dirty.days)) {
      const table = p.table === 'day' ? 'cdn_traffic_country_day' : 'cdn_traffic_country_hour';
      parts.push(`select country, requests, bytes, errors from ${table} where bucket >= ? and bucket < ? and endpoint_id = ?`);
      params.push(new Date(floorTo(p.from, HOUR)), new Date(p.to), endpointId ?? NIL);
    }
    if (!parts.length) return [];
    const rows = await em.execute<{ country: string; requests: string; bytes: string; errors: string }[]>(
      `select country, sum(requests)::bigint as requests, sum(bytes)::bigint as bytes, sum(errors)::bigint as errors from (${parts.join(' union all ')}) x
       group by country order by sum(requests) desc, country`, params);
    return rows.map((r) => ({ country: r.country, requests: Number(r.requests), bytes: Number(r.bytes), errors: Number(r.errors) }));
  }

  async rollUp(em: EntityManager, now: Date): Promise<{ hours: number; days: number }> {
    const peek = async (granularity: string) => (await em.execute<{ bucket: Date }[]>(
      `select bucket from cdn_traffic_dirty where granularity = ? order by bucket limit ${ROLLUP_BATCH}`, [granularity])).map((r) => new Date(r.bucket).getTime());
    const cols = COUNTER_COLUMNS.join(', ');
    const urlCols = URL_COLUMNS.join(', ');
    // Hours from their minutes, URL tails of finished hours pruned.
    const hourList = await peek('hour');
    await ensurePartitions(em, 'cdn_traffic_hour', hourList);
    let hours = 0;
    for (const h of hourList) {
      await em.transactional(async (tem) => {
        const taken = await tem.execute(`delete from cdn_traffic_dirty where granularity = 'hour' and bucket = ? returning bucket`, [new Date(h)]);
        if (!taken.length) return;
        hours++;
        await tem.execute(`delete from cdn_traffic_hour where bucket = ?`, [new Date(h)]);
        await tem.execute(
          `insert into cdn_traffic_hour (bucket, endpoint_id, origin_id, cache_rule_id, ${cols})
           select ?::timestamptz, endpoint_id, origin_id, cache_rule_id, ${sumList(COUNTER_COLUMNS)} from cdn_traffic_minute
           where bucket >= ? and bucket < ? group by endpoint_id, origin_id, cache_rule_id`, [new Date(h), new Date(h), new Date(h + HOUR)]);
        if (h + HOUR <= now.getTime()) await this.#pruneUrls(tem, 'cdn_traffic_url_hour', h);
      });
    }
    // Days from their hours (counters, URLs, countries).
    const dayList = await peek('day');
    await ensurePartitions(em, 'cdn_traffic_day', dayList);
    await ensurePartitions(em, 'cdn_traffic_url_day', dayList);
    await ensurePartitions(em, 'cdn_traffic_country_day', dayList);
    let days = 0;
    for (const d of dayList) {
      // A day whose hours are not all rolled up yet waits for them.
      const pending = await em.execute(`select 1 from cdn_traffic_dirty where granularity = 'hour' and bucket >= ? and bucket < ? limit 1`, [new Date(d), new Date(d + DAY)]);
      if (pending.length) continue;
      await em.transactional(async (tem) => {
        const taken = await tem.execute(`delete from cdn_traffic_dirty where granularity = 'day' and bucket = ? returning bucket`, [new Date(d)]);
        if (!taken.length) return;
        days++;
        const span = [new Date(d), new Date(d), new Date(d + DAY)];
        await tem.execute(`delete from cdn_traffic_day where bucket = ?`, [new Date(d)]);
        await tem.execute(
          `insert into cdn_traffic_day (bucket, endpoint_id, origin_id, cache_rule_id, ${cols})
           select ?::timestamptz, endpoint_id, origin_id, cache_rule_id, ${sumList(COUNTER_COLUMNS)} from cdn_traffic_hour
           where bucket >= ? and bucket < ? group by endpoint_id, origin_id, cache_rule_id`, span);
        await tem.execute(`delete from cdn_traffic_url_day where bucket = ?`, [new Date(d)]);
        await tem.execute(
          `insert into cdn_traffic_url_day (bucket, scope, endpoint_id, url, ${urlCols})
           select ?::timestamptz, scope, endpoint_id, url, ${sumList(URL_COLUMNS)} from cdn_traffic_url_hour
           where bucket >= ? and bucket < ? group by scope, endpoint_id, url`, span);
        if (d + DAY <= now.getTime()) await this.#pruneUrls(tem, 'cdn_traffic_url_day', d);
        await tem.execute(`delete from cdn_traffic_country_day where bucket = ?`, [new Date(d)]);
        await tem.execute(
          `insert into cdn_traffic_country_day (bucket, endpoint_id, country, requests, bytes, errors)
           select ?::timestamptz, endpoint_id, country, sum(requests), sum(bytes), sum(errors) from cdn_traffic_country_hour
           where bucket >= ? and bucket < ? group by endpoint_id, country`, span);
      });
    }
    return { hours, days };
  }

  /** Keeps the top URLs of a finished bucket: 500 per endpoint, 1,000 platform-wide (by requests). */
  async #pruneUrls(em: EntityManager, table: string, bucket: number): Promise<void> {
    await em.execute(
      `delete from ${table} u using (
         select scope, endpoint_id, url, row_number() over (partition by scope, case when scope = 'endpoint' then endpoint_id end order by requests desc, url) as rank
         from ${table} where bucket = ?
       ) r
       where u.bucket = ? and u.scope = r.scope and u.endpoint_id = r.endpoint_id and u.url = r.url
         and r.rank > case when r.scope = 'endpoint' then ${URLS_PER_ENDPOINT} else ${URLS_PLATFORM} end`, [new Date(bucket), new Date(bucket)]);
  }

  async retain(em: EntityManager, now: Date): Promise<{ dropped: string[]; receipts: number }> {
    const dropped = await maintainPartitions(em, now);
    let receipts = 0;
    for (;;) {
      const gone = await em.execute(
        `delete from cdn_traffic_receipt where report_id in (select report_id from cdn_traffic_receipt where received_at < ? order by received_at limit 10000) returning report_id`,
        [new Date(now.getTime() - RECEIPT_RETENTION_MS)]);
      receipts += gone.length;
      if (gone.length < 10_000) break;
    }
    return { dropped, receipts };
  }
}

