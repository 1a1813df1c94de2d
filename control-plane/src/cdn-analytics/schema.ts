// The analytics tables' shape (migration 0045): the counters every rollup row
// carries, the URL counters, and each partitioned table's partition period and
// retention (decided in docs/decisions.md, "Traffic analytics").
import { RESPONSE_TIME_BUCKETS_MS } from '../../../shared/src/metrics/buckets.ts';
import { DAY } from '../core/clock.ts';

/** The nil uuid: "no origin", "no cache rule", and the platform-wide row's endpoint. */
export const NIL = '00000000-0000-0000-0000-000000000000';

export const CACHE_STATUS_COLUMNS = ['hit', 'miss', 'expired', 'stale', 'bypass', 'revalidated', 'updating'] as const;
/** One column per response-time bucket of shared/src/metrics/buckets.ts (the last one counts the rest). */
export const RT_COLUMNS = Array.from({ length: RESPONSE_TIME_BUCKETS_MS.length + 1 }, (_, i) => `rt${i}`);
/** Every summable column of a counters row, in a fixed order. */
export const COUNTER_COLUMNS = [
  'requests', 's2xx', 's3xx', 's4xx', 's5xx', ...CACHE_STATUS_COLUMNS, 'bytes_from_cache', 'bytes_from_origin', ...RT_COLUMNS, 'rt_sum_ms',
] as const;
export const URL_COLUMNS = ['requests', 'bytes', 'cache_hits', ...CACHE_STATUS_COLUMNS] as const;

export type PartitionPeriod = 'day' | 'month' | 'year';

/** Each partitioned table: its partitions' span and how long its rows are kept. */
export const ANALYTICS_TABLES: Record<string, { period: PartitionPeriod; retentionMs: number }> = {
  cdn_traffic_minute: { period: 'day', retentionMs: 7 * DAY },
  cdn_traffic_hour: { period: 'month', retentionMs: 90 * DAY },
  cdn_traffic_day: { period: 'year', retentionMs: 730 * DAY },
  // Top URLs answer periods up to 7 days.
  cdn_traffic_url_hour: { period: 'day', retentionMs: 8 * DAY },
  cdn_traffic_url_day: { period: 'day', retentionMs: 8 * DAY },
  // Geography answers periods up to 30 days.
  cdn_traffic_country_hour: { period: 'day', retentionMs: 8 * DAY },
  cdn_traffic_country_day: { period: 'month', retentionMs: 730 * DAY },
};

/** Reports are remembered this long (agents send a report again within a day at most). */
export const RECEIPT_RETENTION_MS = DAY;
