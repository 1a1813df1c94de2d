// The metrics routes of document 3 §4.13 (traffic, cache, bandwidth, top URLs,
// geography): bare records computed from the stored traffic rollups; viewers
// and up read them.
import { z } from 'zod';
import { bare } from '../http/route.ts';
import { limitParam, uuid } from '../http/schemas.ts';
import { bandwidth, cacheStatistics, geography, topUrls, trafficStatistics } from './metrics-service.ts';
import { ALL_PERIODS, DEFAULT_GRANULARITY, GRANULARITIES, MAX_POINTS, SHORT_PERIODS } from './periods.ts';
import { defineAnalyticsRoute as defineRoute } from './services.ts';

const tags = ['CDN: metrics'];
const access = { permission: 'cdn.read' } as const;
const rate = () => z.number().min(0).max(1);
const defaults = Object.entries(DEFAULT_GRANULARITY).map(([p, g]) => `${p} ${g}`).join(', ');
const source = 'Computed from the per-minute traffic rollups the edge nodes report (merged per endpoint, origin and cache rule; a report sent twice counts once); '
  + 'the current minute counts as far as reported. Hit rates count answers served from the cache (HIT, STALE, UPDATING, REVALIDATED) over those that went through it (BYPASS excluded).';

const trafficRoute = defineRoute({
  method: 'get', path: '/v1/cdn/metrics/traffic', tags, access,
  summary: 'Traffic statistics',
  description: `Platform-wide, or for one origin. ${source} error_rate: 4xx and 5xx answers over all; p95/p99 from the merged response-time histograms `
    + '(interpolated within their bucket; above 10 s the last bound). Periods: last_1h, last_6h, last_24h (the last N minutes), last_7d (from a whole hour).',
  query: z.strictObject({ period: z.enum(SHORT_PERIODS), origin_id: uuid().transform((v) => v.toLowerCase()).optional() }),
  responses: {
    200: bare(z.object({
      period: z.enum(SHORT_PERIODS), total_requests: z.number().int(), cache_hit_rate: rate(), error_rate: rate(), avg_response_time_ms: z.number(),
      p95_response_time_ms: z.number(), p99_response_time_ms: z.number(), bytes_served: z.number().int(),
      by_status_class: z.object({ '2xx': z.number().int(), '3xx': z.number().int(), '4xx': z.number().int(), '5xx': z.number().int() }),
    })),
  },
  async handler({ query, rc, app }) {
    return trafficStatistics(app, rc, query.period, query.origin_id);
  },
});

const cacheRoute = defineRoute({
  method: 'get', path: '/v1/cdn/metrics/cache', tags, access,
  summary: 'Cache statistics',
  description: `Platform-wide, or for one cache rule. ${source} hit_count HIT; miss_count MISS and EXPIRED; stale_count STALE and UPDATING; revalidate_count REVALIDATED.`,
  query: z.strictObject({ period: z.enum(SHORT_PERIODS), cache_rule_id: uuid().transform((v) => v.toLowerCase()).optional() }),
  responses: {
    200: bare(z.object({
      period: z.enum(SHORT_PERIODS), hit_count: z.number().int(), miss_count: z.number().int(), bypass_count: z.number().int(), revalidate_count: z.number().int(),
      stale_count: z.number().int(), hit_rate: rate(), bytes_from_cache: z.number().int(), bytes_from_origin: z.number().int(),
    })),
  },
  async handler({ query, rc, app }) {
    return cacheStatistics(app, rc, query.period, query.cache_rule_id);
  },
});

const bandwidthRoute = defineRoute({
  method: 'get', path: '/v1/cdn/metrics/bandwidth', tags, access,
  summary: 'Bandwidth',
  description: `Platform-wide, or for one endpoint: bytes sent to viewers per step, the last step the one now falls in (steps are aligned to UTC). ${source} `
    + `granularity 1m, 5m, 15m, 1h, 6h or 1d; default per period: ${defaults}; at most ${MAX_POINTS} points (a finer one is 400). The totals are the sums of the series.`,
  query: z.strictObject({
    period: z.enum(ALL_PERIODS), endpoint_id: uuid().transform((v) => v.toLowerCase()).optional(),
    granularity: z.enum(Object.keys(GRANULARITIES) as [keyof typeof GRANULARITIES, ...(keyof typeof GRANULARITIES)[]]).optional(),
  }),
  responses: {
    200: bare(z.object({
      period: z.enum(ALL_PERIODS), endpoint_id: z.uuid().nullable(), granularity: z.string(),
      total_bytes_transferred: z.number().int(), total_bytes_from_cache: z.number().int(), total_bytes_from_origin: z.number().int(), cache_bandwidth_ratio: rate(),
      timeseries: z.array(z.object({ timestamp: z.string(), bytes_transferred: z.number().int(), bytes_from_cache: z.number().int() })),
    })),
  },
  async handler({ query, rc, app }) {
    return bandwidth(app, rc, query.period, query.endpoint_id, query.granularity);
  },
});

const topUrlsRoute = defineRoute({
  method: 'get', path: '/v1/cdn/metrics/top-urls', tags, access,
  summary: 'Top URLs',
  description: 'Platform-wide, or for one endpoint: the most requested URLs (https://<endpoint hostname><path>; queries are not told apart), by requests (default) '
    + 'or bytes_transferred. URLs are kept per hour (the top 500 per endpoint and 1,000 platform-wide of each finished hour), so a period counts every hour it touches. '
    + `${source}`,
  query: z.strictObject({
    period: z.enum(SHORT_PERIODS), endpoint_id: uuid().transform((v) => v.toLowerCase()).optional(),
    ranked_by: z.enum(['requests', 'bytes_transferred']).default('requests'), limit: limitParam(500, 50),
  }),
  responses: {
    200: bare(z.object({
      period: z.enum(SHORT_PERIODS), endpoint_id: z.uuid().nullable(), ranked_by: z.enum(['requests', 'bytes_transferred']),
      items: z.array(z.object({
        url: z.string(), request_count: z.number().int(), bytes_transferred: z.number().int(), cache_hit_rate: rate(),
        cache_status_breakdown: z.record(z.string(), z.number().int()),
      })),
    })),
  },
  async handler({ query, rc, app }) {
    return topUrls(app, rc, query.period, query.endpoint_id, query.ranked_by, query.limit);
  },
});

const geographyRoute = defineRoute({
  method: 'get', path: '/v1/cdn/metrics/geography', tags, access,
  summary: 'Geography',
  description: 'Platform-wide, or for one endpoint: requests by the viewer\'s country (the edge\'s GeoIP database; addresses without a country, such as private '
    + 'ones, are not counted here) and continent, most requests first; `limit` bounds the countries listed (continents count every country). error_rate: 4xx and 5xx '
    + `answers over all. Countries are kept per hour, so a period counts every hour it touches. ${source}`,
  query: z.strictObject({ period: z.enum(ALL_PERIODS), endpoint_id: uuid().transform((v) => v.toLowerCase()).optional(), limit: limitParam(250, 100) }),
  responses: {
    200: bare(z.object({
      period: z.enum(ALL_PERIODS), endpoint_id: z.uuid().nullable(),
      by_country: z.array(z.object({ country_code: z.string(), country_name: z.string(), request_count: z.number().int(), bytes_transferred: z.number().int(), error_rate: rate() })),
      by_continent: z.array(z.object({ continent_code: z.string(), continent_name: z.string(), request_count: z.number().int(), bytes_transferred: z.number().int() })),
    })),
  },
  async handler({ query, rc, app }) {
    return geography(app, rc, query.period, query.endpoint_id, query.limit);
  },
});

export const metricsRoutes = [trafficRoute, cacheRoute, bandwidthRoute, topUrlsRoute, geographyRoute];
