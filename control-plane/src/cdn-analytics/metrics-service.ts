// The five metrics of document 3 §4.13, computed from the stored rollups
// (rollup-store.ts). Definitions (docs/decisions.md "Traffic analytics"):
// served from the cache = HIT, STALE, UPDATING and REVALIDATED; a hit rate is
// those over every answer that went through the cache (BYPASS excluded); an
// error is a 4xx or 5xx answer; percentiles come from the merged
// response-time histograms, interpolated within their bucket.
import { countries as COUNTRIES, continents as CONTINENTS } from 'countries-list';
import type { EntityManager } from '@mikro-orm/postgresql';
import { RESPONSE_TIME_BUCKETS_MS } from '../../../shared/src/metrics/buckets.ts';
import { ApiError } from '../http/errors.ts';
import type { RequestContext } from '../core/request-context.ts';
import { DEFAULT_GRANULARITY, MAX_POINTS, periodRange, seriesRange, type Granularity, type Period } from './periods.ts';
import { topUrlOf, type CounterScope, type CounterTotals, type RollupStore } from './rollup-store.ts';
import type { AnalyticsServices } from './services.ts';

const rate = (part: number, whole: number) => (whole > 0 ? Math.round((part / whole) * 10_000) / 10_000 : 0);
const fromCache = (s: Pick<CounterTotals['statuses'], 'hit' | 'stale' | 'updating' | 'revalidated'>) => s.hit + s.stale + s.updating + s.revalidated;

/** The q-quantile (0..1) of a histogram over RESPONSE_TIME_BUCKETS_MS (+ the rest), interpolated linearly within its bucket; 0 when empty. */
export function histogramQuantile(counts: readonly number[], q: number): number {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return 0;
  const target = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i]!;
    if (c > 0 && seen + c >= target) {
      const lower = i === 0 ? 0 : RESPONSE_TIME_BUCKETS_MS[i - 1]!;
      // Beyond the last bound nothing is known but that: the last bound is reported.
      if (i >= RESPONSE_TIME_BUCKETS_MS.length) return RESPONSE_TIME_BUCKETS_MS.at(-1)!;
      const upper = RESPONSE_TIME_BUCKETS_MS[i]!;
      return Math.round((lower + ((target - seen) / c) * (upper - lower)) * 100) / 100;
    }
    seen += c;
  }
  return RESPONSE_TIME_BUCKETS_MS.at(-1)!;
}

function store(app: AnalyticsServices): RollupStore {
  if (!app.trafficRollups) throw new ApiError('SERVICE_UNAVAILABLE', 'Traffic analytics are not available on this control plane');
  return app.trafficRollups;
}

/** 404 unless the row exists (a filter naming nothing is a mistake worth saying). */
async function mustExist(em: EntityManager, table: string, id: string, what: string): Promise<void> {
  const rows = await em.execute(`select 1 from ${table} where id = ?`, [id]);
  if (!rows.length) throw new ApiError('NOT_FOUND', `${what} not found`);
}

export async function trafficStatistics<P extends Period>(app: AnalyticsServices, rc: RequestContext, period: P, originId?: string) {
  if (originId) await mustExist(rc.em, 'cdn_origin', originId, 'Origin');
  const scope: CounterScope = originId ? { kind: 'origin', id: originId } : { kind: 'platform' };
  const t = await store(app).totals(rc.em, periodRange(period, app.clock.now().getTime()), scope);
  const cached = t.requests - t.statuses.bypass;
  return {
    period,
    total_requests: t.requests,
    cache_hit_rate: rate(fromCache(t.statuses), cached),
    error_rate: rate(t.s4xx + t.s5xx, t.requests),
    avg_response_time_ms: t.requests ? Math.round((t.rt_sum_ms / t.requests) * 100) / 100 : 0,
    p95_response_time_ms: histogramQuantile(t.rt, 0.95),
    p99_response_time_ms: histogramQuantile(t.rt, 0.99),
    bytes_served: t.bytes_from_cache + t.bytes_from_origin,
    by_status_class: { '2xx': t.s2xx, '3xx': t.s3xx, '4xx': t.s4xx, '5xx': t.s5xx },
  };
}

export async function cacheStatistics<P extends Period>(app: AnalyticsServices, rc: RequestContext, period: P, cacheRuleId?: string) {
  if (cacheRuleId) await mustExist(rc.em, 'cdn_cache_rule', cacheRuleId, 'Cache rule');
  const scope: CounterScope = cacheRuleId ? { kind: 'cache_rule', id: cacheRuleId } : { kind: 'platform' };
  const t = await store(app).totals(rc.em, periodRange(period, app.clock.now().getTime()), scope);
  const s = t.statuses;
  const hit = s.hit;
  const miss = s.miss + s.expired;
  const stale = s.stale + s.updating;
  return {
    period,
    hit_count: hit,
    miss_count: miss,
    bypass_count: s.bypass,
    revalidate_count: s.revalidated,
    stale_count: stale,
    hit_rate: rate(hit + stale + s.revalidated, hit + miss + stale + s.revalidated),
    bytes_from_cache: t.bytes_from_cache,
    bytes_from_origin: t.bytes_from_origin,
  };
}

export async function bandwidth<P extends Period>(app: AnalyticsServices, rc: RequestContext, period: P, endpointId: string | undefined, granularity: Granularity | undefined) {
  if (endpointId) await mustExist(rc.em, 'cdn_endpoint', endpointId, 'Endpoint');
  const chosen = granularity ?? DEFAULT_GRANULARITY[period];
  const plan = seriesRange(period, chosen, app.clock.now().getTime());
  if (!plan) {
    throw new ApiError('VALIDATION_ERROR', undefined, { errors: [{ field: 'granularity', message: `${chosen} over ${period} would be more than ${MAX_POINTS} points; choose a coarser granularity` }] });
  }
  const scope: CounterScope = endpointId ? { kind: 'endpoint', id: endpointId } : { kind: 'platform' };
  const rows = new Map((await store(app).series(rc.em, plan.range, plan.step, scope)).map((r) => [r.bucket, r]));
  let total = 0;
  let cached = 0;
  const timeseries = Array.from({ length: plan.points }, (_, i) => {
    const bucket = plan.range.from + i * plan.step;
    const r = rows.get(bucket);
    const fromCacheBytes = r?.bytes_from_cache ?? 0;
    const transferred = fromCacheBytes + (r?.bytes_from_origin ?? 0);
    total += transferred;
    cached += fromCacheBytes;
    return { timestamp: new Date(bucket).toISOString(), bytes_transferred: transferred, bytes_from_cache: fromCacheBytes };
  });
  return {
    period, endpoint_id: endpointId ?? null, granularity: chosen,
    total_bytes_transferred: total, total_bytes_from_cache: cached, total_bytes_from_origin: total - cached,
    cache_bandwidth_ratio: rate(cached, total), timeseries,
  };
}

/** Endpoint hostnames by id (deleted endpoints are absent). */
async function hostnames(em: EntityManager, ids: readonly string[]): Promise<Map<string, string>> {
  if (!ids.length) return new Map();
  const rows = await em.execute<{ id: string; hostname: string }[]>(
    `select id, hostname from cdn_endpoint where id in (select value::uuid from jsonb_array_elements_text(?::jsonb))`, [JSON.stringify([...new Set(ids)])]);
  return new Map(rows.map((r) => [r.id, r.hostname]));
}

export async function topUrls<P extends Period>(app: AnalyticsServices, rc: RequestContext, period: P, endpointId: string | undefined, rankedBy: 'requests' | 'bytes_transferred', limit: number) {
  if (endpointId) await mustExist(rc.em, 'cdn_endpoint', endpointId, 'Endpoint');
  const rows = await store(app).topUrls(rc.em, periodRange(period, app.clock.now().getTime()), endpointId ?? null, rankedBy === 'requests' ? 'requests' : 'bytes', limit);
  const hosts = await hostnames(rc.em, rows.map((r) => r.endpoint_id));
  const NAMES = { hit: 'HIT', miss: 'MISS', expired: 'EXPIRED', stale: 'STALE', bypass: 'BYPASS', revalidated: 'REVALIDATED', updating: 'UPDATING' } as const;
  return {
    period, endpoint_id: endpointId ?? null, ranked_by: rankedBy,
    items: rows.map((r) => {
      const host = hosts.get(r.endpoint_id);
      const breakdown: Record<string, number> = {};
      for (const [column, name] of Object.entries(NAMES)) if (r.statuses[column as keyof typeof NAMES] > 0) breakdown[name] = r.statuses[column as keyof typeof NAMES];
      return {
        url: topUrlOf(r.url, host || undefined),
        request_count: r.requests,
        bytes_transferred: r.bytes,
        cache_hit_rate: rate(fromCache(r.statuses), r.requests - r.statuses.bypass),
        cache_status_breakdown: breakdown,
      };
    }),
  };
}

export async function geography<P extends Period>(app: AnalyticsServices, rc: RequestContext, period: P, endpointId: string | undefined, limit: number) {
  if (endpointId) await mustExist(rc.em, 'cdn_endpoint', endpointId, 'Endpoint');
  const rows = await store(app).countries(rc.em, periodRange(period, app.clock.now().getTime()), endpointId ?? null);
  const continents = new Map<string, { continent_code: string; continent_name: string; request_count: number; bytes_transferred: number }>();
  for (const r of rows) {
    const code = (COUNTRIES as Record<string, { continent: string } | undefined>)[r.country]?.continent;
    if (!code) continue;
    let c = continents.get(code);
    if (!c) continents.set(code, (c = { continent_code: code, continent_name: (CONTINENTS as Record<string, string>)[code] ?? code, request_count: 0, bytes_transferred: 0 }));
    c.request_count += r.requests;
    c.bytes_transferred += r.bytes;
  }
  return {
    period, endpoint_id: endpointId ?? null,
    by_country: rows.slice(0, limit).map((r) => ({
      country_code: r.country,
      country_name: (COUNTRIES as Record<string, { name: string } | undefined>)[r.country]?.name ?? r.country,
      request_count: r.requests, bytes_transferred: r.bytes, error_rate: rate(r.errors, r.requests),
    })),
    by_continent: [...continents.values()].sort((a, b) => b.request_count - a.request_count || a.continent_code.localeCompare(b.continent_code)),
  };
}
