// The rollup store (issue 24 item 4): what the metrics routes and the control
// channel need of traffic analytics, behind an interface so another store (a
// columnar one, docs/decisions.md) can take over without touching either.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { CACHE_STATUS_COLUMNS } from './schema.ts';

export type CacheStatusColumn = (typeof CACHE_STATUS_COLUMNS)[number];

/** The counts of one slice (endpoint, origin, cache rule) of a minute. */
export interface SliceCounts {
  origin_id: string;
  cache_rule_id: string;
  requests: number;
  s2xx: number;
  s3xx: number;
  s4xx: number;
  s5xx: number;
  statuses: Record<CacheStatusColumn, number>;
  bytes_from_cache: number;
  bytes_from_origin: number;
  /** Per response-time bucket (shared/src/metrics/buckets.ts, plus the rest). */
  rt: number[];
  rt_sum_ms: number;
}

/**
 * A top URL as stored: the path (and query) of an HTTPS request, or `http:` then the path of a plain-HTTP one, so
 * the two are counted apart in one text key (rows stored before the scheme was reported read as HTTPS).
 */
const PLAIN_HTTP = 'http:';

export function topUrlKey(path: string, scheme: string): string {
  return scheme === 'http' ? PLAIN_HTTP + path : path;
}

/** The URL a stored key stands for on `host`, with the scheme the viewer used; the path alone without a host (a deleted endpoint). */
export function topUrlOf(key: string, host: string | undefined): string {
  const plain = key.startsWith(PLAIN_HTTP);
  const path = plain ? key.slice(PLAIN_HTTP.length) : key;
  return host === undefined ? path : `${plain ? 'http' : 'https'}://${host}${path}`;
}

export interface UrlCounts {
  /** topUrlKey's key. */
  url: string;
  requests: number;
  bytes: number;
  cache_hits: number;
  statuses: Record<CacheStatusColumn, number>;
}

export interface CountryCounts {
  country: string;
  requests: number;
  bytes: number;
  errors: number;
}

/** One endpoint's minute from one node. */
export interface MinuteRollup {
  minute: number;
  endpoint_id: string;
  slices: SliceCounts[];
  urls: UrlCounts[];
  countries: CountryCounts[];
}

/** One agent's report: stored once whatever the number of times it arrives. */
export interface TrafficReportInput {
  report_id: string;
  node_id: string;
  rollups: MinuteRollup[];
}

/** Sums over a time range: a slice's counts without its keys. */
export type CounterTotals = Omit<SliceCounts, 'origin_id' | 'cache_rule_id'>;

/** What a counters query sums: the platform, one endpoint, one origin or one cache rule. */
export type CounterScope = { kind: 'platform' } | { kind: 'endpoint'; id: string } | { kind: 'origin'; id: string } | { kind: 'cache_rule'; id: string };

export interface TimeRange {
  /** Inclusive, minute-aligned (ms). */
  from: number;
  /** Exclusive, minute-aligned (ms). */
  to: number;
}

export interface RollupStore {
  /**
   * Stores the reports not stored before: `confirmed` every report id now stored (new or not), to confirm to
   * the agent; `fresh` how many were new; `rollups` how many rollups they carried.
   */
  ingest(em: EntityManager, reports: readonly TrafficReportInput[], now: Date): Promise<{ confirmed: string[]; fresh: number; rollups: number }>;
  totals(em: EntityManager, range: TimeRange, scope: CounterScope): Promise<CounterTotals>;
  /** Bytes per step (ms, epoch-aligned; UTC days for a day) over the range. */
  series(em: EntityManager, range: TimeRange, stepMs: number, scope: CounterScope): Promise<{ bucket: number; bytes_from_cache: number; bytes_from_origin: number }[]>;
  /** Every hour the range touches counts (URLs and countries are kept per hour). */
  topUrls(em: EntityManager, range: TimeRange, endpointId: string | null, rankedBy: 'requests' | 'bytes', limit: number): Promise<(UrlCounts & { endpoint_id: string })[]>;
  countries(em: EntityManager, range: TimeRange, endpointId: string | null): Promise<CountryCounts[]>;
  /** Rolls the minutes written since the last run up to hours and days; prunes long URL tails. */
  rollUp(em: EntityManager, now: Date): Promise<{ hours: number; days: number }>;
  /** Makes partitions ahead, drops those past retention, forgets old report ids. */
  retain(em: EntityManager, now: Date): Promise<{ dropped: string[]; receipts: number }>;
}
