import { Migration } from '@mikro-orm/migrations';

// The columns as they were at this migration (cdn-analytics/schema.ts names them for the code).
const CACHE_STATUS_COLUMNS = ['hit', 'miss', 'expired', 'stale', 'bypass', 'revalidated', 'updating'];
const COUNTER_COLUMNS = [
  'requests', 's2xx', 's3xx', 's4xx', 's5xx', ...CACHE_STATUS_COLUMNS, 'bytes_from_cache', 'bytes_from_origin',
  ...Array.from({ length: 14 }, (_, i) => `rt${i}`), 'rt_sum_ms',
];
const URL_COLUMNS = ['requests', 'bytes', 'cache_hits', ...CACHE_STATUS_COLUMNS];
const TABLES = [
  'cdn_traffic_minute', 'cdn_traffic_hour', 'cdn_traffic_day', 'cdn_traffic_url_hour', 'cdn_traffic_url_day', 'cdn_traffic_country_hour',
  'cdn_traffic_country_day', 'cdn_traffic_receipt', 'cdn_traffic_dirty',
];

// Traffic analytics (issue 24 item 4; cdn-analytics/): the agents' per-minute
// rollups merged per endpoint, origin and cache rule (the nil uuid stands for
// none, and for the platform-wide row of a bucket), rolled up to hours and
// days; top URLs and countries per hour and day (endpoint scope, and the
// platform-wide scope); the reports already stored (a report sent again is
// counted once); the buckets whose roll-ups are out of date. The counters,
// URL and country tables are partitioned by range of their bucket: their
// partitions are made ahead of use and dropped past retention by jobs.
// Raw SQL only: no entity maps them (db/orm.ts RAW_SQL_TABLES).
export class Migration0045TrafficRollups extends Migration {
  override async up(): Promise<void> {
    const counters = COUNTER_COLUMNS.map((c) => `${c} ${c === 'rt_sum_ms' ? 'double precision' : 'bigint'} not null default 0`).join(', ');
    const urls = URL_COLUMNS.map((c) => `${c} bigint not null default 0`).join(', ');
    for (const table of ['cdn_traffic_minute', 'cdn_traffic_hour', 'cdn_traffic_day']) {
      this.addSql(`create table ${table} (
        bucket timestamptz not null, endpoint_id uuid not null, origin_id uuid not null, cache_rule_id uuid not null, ${counters},
        primary key (bucket, endpoint_id, origin_id, cache_rule_id)) partition by range (bucket)`);
      this.addSql(`create index ${table}_origin_idx on ${table} (origin_id, bucket) where origin_id <> '00000000-0000-0000-0000-000000000000'`);
      this.addSql(`create index ${table}_rule_idx on ${table} (cache_rule_id, bucket) where cache_rule_id <> '00000000-0000-0000-0000-000000000000'`);
      this.addSql(`create index ${table}_endpoint_idx on ${table} (endpoint_id, bucket)`);
    }
    for (const table of ['cdn_traffic_url_hour', 'cdn_traffic_url_day']) {
      this.addSql(`create table ${table} (
        bucket timestamptz not null, scope text not null check (scope in ('endpoint', 'platform')), endpoint_id uuid not null, url text not null, ${urls},
        primary key (bucket, scope, endpoint_id, url)) partition by range (bucket)`);
    }
    for (const table of ['cdn_traffic_country_hour', 'cdn_traffic_country_day']) {
      this.addSql(`create table ${table} (
        bucket timestamptz not null, endpoint_id uuid not null, country char(2) not null,
        requests bigint not null default 0, bytes bigint not null default 0, errors bigint not null default 0,
        primary key (bucket, endpoint_id, country)) partition by range (bucket)`);
    }
    this.addSql(`create table cdn_traffic_receipt (report_id uuid primary key, node_id uuid not null, received_at timestamptz not null)`);
    this.addSql(`create index cdn_traffic_receipt_received_idx on cdn_traffic_receipt (received_at)`);
    this.addSql(`create table cdn_traffic_dirty (granularity text not null check (granularity in ('hour', 'day')), bucket timestamptz not null, primary key (granularity, bucket))`);
  }

  override async down(): Promise<void> {
    for (const table of TABLES) this.addSql(`drop table if exists ${table} cascade`);
  }
}
