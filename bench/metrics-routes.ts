// The metrics routes at size (issue 24 "Done means"): 30 days of per-minute
// traffic rollups for 1,000 endpoints, stored as the product keeps them —
// minutes for the last --minute-days (7 by default, the retention), hours and
// days for 30 days, URLs per hour (10 per endpoint and hour, the platform's
// top 1,000 of each hour) for 8 days with their days, countries per hour for
// 8 days and per day for 30 — the current hour still dirty (read from its
// minutes, as between two roll-ups). Every route, period and filter (platform
// wide, and by origin, cache rule or endpoint) is then asked through HTTP of a
// control-plane process. Goal: p99 under 100 ms for every line.
//
// One run: a fresh database on the machine's PostgreSQL (migrated by the
// control plane), filled with set-based SQL (generate_series), VACUUM ANALYZE;
// then per line a warm-up and --n sequential requests. The table is printed
// and added to bench/results/metrics-routes.md (newest first).
//
// Run: node bench/metrics-routes.ts [--n 100] [--warmup 10] [--minute-days 7] [--endpoints 1000]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { COUNTER_COLUMNS, NIL, RT_COLUMNS } from '../control-plane/src/cdn-analytics/schema.ts';
import { publishedEndpoint, startDeployment } from '../test/support/edge-deployment.ts';
import { detectServices } from '../test/support/services.ts';
import { numberFlag } from './lib/cli.ts';
import { summarize } from './lib/stats.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const N = numberFlag('n', 100);
const WARMUP = numberFlag('warmup', 10);
const MINUTE_DAYS = numberFlag('minute-days', 7);
const ENDPOINTS = numberFlag('endpoints', 1000);
const DAYS = 30;
const GOAL_MS = 100;

const teardowns: (() => unknown)[] = [];
const t = { teardown: (fn: () => unknown) => teardowns.push(fn) };
const cleanup = async () => {
  for (const fn of teardowns.reverse()) await fn();
};

const { postgresUrl } = await detectServices();
if (!postgresUrl) {
  console.log('bench:metrics needs PostgreSQL at 127.0.0.1:5432');
  process.exit(1);
}

try {
  const deployment = await startDeployment(t, { postgresUrl, env: { JOBS_WORKER: 'false' } });
  // One real endpoint (origin, cache rule): the filters name it; the other endpoints exist only in the rollups.
  const endpoint = await publishedEndpoint(deployment, 9, 'bench');
  const full = await deployment.must('GET', `/v1/cdn/endpoints/${endpoint.id}`);
  const rule = await deployment.must('POST', '/v1/cdn/cache-rules', { name: 'all', distribution_id: endpoint.id, match: { paths: ['/*'] }, ttl_seconds: 60, priority: 1 });
  const originId = full.default_origin_id as string;

  const db = new pg.Client({ connectionString: deployment.database.url });
  await db.connect();
  teardowns.push(() => db.end());
  const now = Date.now();
  const hourNow = now - (now % 3_600_000);
  const dayNow = now - (now % 86_400_000);
  const start = dayNow - (DAYS - 1) * 86_400_000;
  const minuteStart = Math.max(start, hourNow - MINUTE_DAYS * 86_400_000 + 3_600_000);
  const iso = (ms: number) => new Date(ms).toISOString();

  const partitions = async (table: string, period: 'day' | 'month' | 'year', from: number, to: number) => {
    for (let d = new Date(from); d.getTime() <= to;) {
      const s = period === 'day' ? new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate())) : period === 'month' ? new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)) : new Date(Date.UTC(d.getUTCFullYear(), 0, 1));
      const e = period === 'day' ? new Date(s.getTime() + 86_400_000) : period === 'month' ? new Date(Date.UTC(s.getUTCFullYear(), s.getUTCMonth() + 1, 1)) : new Date(Date.UTC(s.getUTCFullYear() + 1, 0, 1));
      await db.query(`create table if not exists ${table}_p${iso(s.getTime()).slice(0, 10).replace(/-/g, '')} partition of ${table} for values from ('${iso(s.getTime())}') to ('${iso(e.getTime())}')`);
      d = e;
    }
  };
  const fillStarted = performance.now();
  await partitions('cdn_traffic_minute', 'day', minuteStart, now + 86_400_000);
  await partitions('cdn_traffic_hour', 'month', start, now);
  await partitions('cdn_traffic_day', 'year', start, now);
  await partitions('cdn_traffic_url_hour', 'day', dayNow - 8 * 86_400_000, now);
  await partitions('cdn_traffic_url_day', 'day', dayNow - 8 * 86_400_000, now);
  await partitions('cdn_traffic_country_hour', 'day', dayNow - 8 * 86_400_000, now);
  await partitions('cdn_traffic_country_day', 'month', start, now);

  // Endpoint i's id: the real endpoint for i = 0, made-up ids for the others. Its one slice per minute names the real
  // origin and cache rule for endpoint 0. Counters vary with the bucket and the endpoint so sums are not constant.
  const endpointId = (i: string) => `case when ${i} = 0 then '${endpoint.id}'::uuid else md5('ep' || ${i})::uuid end`;
  const counters = (scale: string) => COUNTER_COLUMNS.map((c) => {
    if (c === 'rt_sum_ms') return `(${scale}) * 40.0`;
    const weight = c === 'requests' ? 100 : c === 's2xx' ? 90 : c === 's4xx' ? 8 : c === 's5xx' ? 2 : c === 'hit' ? 80 : c === 'miss' ? 15 : c === 'bypass' ? 5
      : c === 'bytes_from_cache' ? 800_000 : c === 'bytes_from_origin' ? 200_000 : RT_COLUMNS.includes(c) ? [5, 20, 30, 20, 10, 6, 4, 2, 1, 1, 1, 0, 0, 0][RT_COLUMNS.indexOf(c)]! : 0;
    return `((${scale})::bigint * ${weight})`;
  }).join(', ');
  const cols = COUNTER_COLUMNS.join(', ');
  const fill = async (table: string, step: number, from: number, to: number, scale: string) => {
    // The platform-wide row: the endpoints' sum (their (1 + e % 7) averages 4).
    const platformScale = `${ENDPOINTS} * ${scale.replaceAll('(1 + (e % 7))', '4')}`;
    const t0 = performance.now();
    await db.query(`insert into ${table} (bucket, endpoint_id, origin_id, cache_rule_id, ${cols})
      select b, ${endpointId('e')}, case when e = 0 then '${originId}'::uuid else '${NIL}'::uuid end, case when e = 0 then '${rule.id}'::uuid else '${NIL}'::uuid end, ${counters(scale)}
      from generate_series('${iso(from)}'::timestamptz, '${iso(to)}'::timestamptz, '${step / 1000} seconds'::interval) b, generate_series(0, ${ENDPOINTS - 1}) e`);
    await db.query(`insert into ${table} (bucket, endpoint_id, origin_id, cache_rule_id, ${cols})
      select b, '${NIL}', '${NIL}', '${NIL}', ${counters(platformScale)}
      from generate_series('${iso(from)}'::timestamptz, '${iso(to)}'::timestamptz, '${step / 1000} seconds'::interval) b`);
    console.log(`filled ${table}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  };
  const scale = `(1 + (e % 7)) * (1 + extract(hour from b)::int % 5)`;
  await fill('cdn_traffic_minute', 60_000, minuteStart, now, scale);
  await fill('cdn_traffic_hour', 3_600_000, start, hourNow - 3_600_000, `60 * ${scale}`);
  await fill('cdn_traffic_day', 86_400_000, start, dayNow - 86_400_000, `1440 * (1 + (e % 7))`);
  // The current hour and day are dirty: read from the minutes (and hours), as between two roll-ups.
  await db.query(`insert into cdn_traffic_dirty (granularity, bucket) values ('hour', $1), ('day', $2)`, [new Date(hourNow), new Date(dayNow)]);

  const urlCols = 'requests, bytes, cache_hits, hit, miss, expired, stale, bypass, revalidated, updating';
  const urlValues = (k: string) => `(100 - ${k}) * 10, (100 - ${k}) * 10000, (100 - ${k}) * 8, (100 - ${k}) * 8, (100 - ${k}) * 2, 0, 0, 0, 0, 0`;
  const urls = async (table: string, step: number, from: number, to: number) => {
    const t0 = performance.now();
    await db.query(`insert into ${table} (bucket, scope, endpoint_id, url, ${urlCols})
      select b, 'endpoint', ${endpointId('e')}, '/asset/' || k || '.js', ${urlValues('k')}
      from generate_series('${iso(from)}'::timestamptz, '${iso(to)}'::timestamptz, '${step / 1000} seconds'::interval) b, generate_series(0, ${ENDPOINTS - 1}) e, generate_series(0, 9) k`);
    await db.query(`insert into ${table} (bucket, scope, endpoint_id, url, ${urlCols})
      select b, 'platform', ${endpointId('e')}, '/asset/' || k || '.js', ${urlValues('k')}
      from generate_series('${iso(from)}'::timestamptz, '${iso(to)}'::timestamptz, '${step / 1000} seconds'::interval) b, generate_series(0, 99) e, generate_series(0, 9) k`);
    console.log(`filled ${table}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  };
  await urls('cdn_traffic_url_hour', 3_600_000, dayNow - 8 * 86_400_000, hourNow);
  await urls('cdn_traffic_url_day', 86_400_000, dayNow - 8 * 86_400_000, dayNow - 86_400_000);
  const COUNTRIES = ['US', 'DE', 'FR', 'GB', 'JP', 'BR', 'IN', 'CA', 'AU', 'ZA'];
  const countries = async (table: string, step: number, from: number, to: number) => {
    const t0 = performance.now();
    await db.query(`insert into ${table} (bucket, endpoint_id, country, requests, bytes, errors)
      select b, case when e < 0 then '${NIL}'::uuid else ${endpointId('e')} end, (array[${COUNTRIES.map((c) => `'${c}'`).join(',')}])[k + 1], (10 - k) * 100 * (case when e < 0 then ${ENDPOINTS} else 1 end), (10 - k) * 100000, k
      from generate_series('${iso(from)}'::timestamptz, '${iso(to)}'::timestamptz, '${step / 1000} seconds'::interval) b, generate_series(-1, ${ENDPOINTS - 1}) e, generate_series(0, 9) k`);
    console.log(`filled ${table}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  };
  await countries('cdn_traffic_country_hour', 3_600_000, dayNow - 8 * 86_400_000, hourNow);
  await countries('cdn_traffic_country_day', 86_400_000, start, dayNow - 86_400_000);
  const t0 = performance.now();
  await db.query('vacuum analyze');
  console.log(`vacuum analyze: ${((performance.now() - t0) / 1000).toFixed(1)} s; fill in all ${((performance.now() - fillStarted) / 1000).toFixed(0)} s`);
  const sizes = (await db.query(`select sum(c.reltuples)::bigint as rows, pg_size_pretty(sum(pg_total_relation_size(c.oid))) as size from pg_class c
    join pg_inherits i on i.inhrelid = c.oid join pg_class p on p.oid = i.inhparent where p.relname like 'cdn_traffic_%' and c.relkind = 'r'`)).rows[0];
  console.log(`rollup tables: ${sizes.rows} rows, ${sizes.size}`);

  const lines: { path: string; p50: number; p99: number; max: number }[] = [];
  const measure = async (p: string) => {
    const once = async () => {
      const t1 = performance.now();
      const res = await deployment.api('GET', p);
      if (res.status !== 200) throw new Error(`${p}: ${res.status} ${JSON.stringify(res.body)}`);
      return performance.now() - t1;
    };
    for (let i = 0; i < WARMUP; i++) await once();
    const samples: number[] = [];
    for (let i = 0; i < N; i++) samples.push(await once());
    const s = summarize(samples);
    lines.push({ path: p, p50: s.p50, p99: s.p99, max: s.max });
    console.log(`${s.p99 < GOAL_MS ? 'ok  ' : 'SLOW'} p50 ${s.p50.toFixed(1).padStart(6)} ms  p99 ${s.p99.toFixed(1).padStart(6)} ms  ${p}`);
  };
  const short = ['last_1h', 'last_6h', 'last_24h', 'last_7d'];
  const all = [...short, 'last_30d'];
  for (const period of short) {
    await measure(`/v1/cdn/metrics/traffic?period=${period}`);
    await measure(`/v1/cdn/metrics/traffic?period=${period}&origin_id=${originId}`);
    await measure(`/v1/cdn/metrics/cache?period=${period}`);
    await measure(`/v1/cdn/metrics/cache?period=${period}&cache_rule_id=${rule.id}`);
    await measure(`/v1/cdn/metrics/top-urls?period=${period}&limit=50`);
    await measure(`/v1/cdn/metrics/top-urls?period=${period}&endpoint_id=${endpoint.id}&ranked_by=bytes_transferred`);
  }
  for (const period of all) {
    await measure(`/v1/cdn/metrics/bandwidth?period=${period}`);
    await measure(`/v1/cdn/metrics/bandwidth?period=${period}&endpoint_id=${endpoint.id}`);
    await measure(`/v1/cdn/metrics/geography?period=${period}`);
    await measure(`/v1/cdn/metrics/geography?period=${period}&endpoint_id=${endpoint.id}`);
  }
  await measure('/v1/cdn/metrics/bandwidth?period=last_7d&granularity=5m');
  const worst = Math.max(...lines.map((l) => l.p99));
  const verdict = worst < GOAL_MS ? `every line under ${GOAL_MS} ms p99 (worst ${worst.toFixed(1)} ms)` : `NOT MET: worst p99 ${worst.toFixed(1)} ms`;
  console.log(verdict);

  const table = [
    `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} — ${ENDPOINTS} endpoints, ${DAYS} days, minutes kept ${MINUTE_DAYS} days; ${sizes.rows} rows (${sizes.size}); n=${N}; load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`,
    '', verdict, '', '| p50 ms | p99 ms | max ms | request |', '|---:|---:|---:|---|',
    ...lines.map((l) => `| ${l.p50.toFixed(1)} | ${l.p99.toFixed(1)} | ${l.max.toFixed(1)} | \`${l.path.replace(endpoint.id, '{endpoint}').replace(originId, '{origin}').replace(rule.id, '{rule}')}\` |`),
    '', '',
  ].join('\n');
  const file = path.join(here, 'results', 'metrics-routes.md');
  const previous = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').replace(/^# .*\n\n/, '') : '';
  fs.writeFileSync(file, `# Metrics routes at size (bench/metrics-routes.ts)\n\n${table}${previous}`);
} finally {
  await cleanup();
}
