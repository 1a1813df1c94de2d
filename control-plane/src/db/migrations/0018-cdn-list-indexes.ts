import { Migration } from '@mikro-orm/migrations';

// The sorts the CDN lists offer, measured at size (bench/cdn-lists.ts; issue 11):
// without an index on the sort key, every page of `sort=name` (or updated_at,
// host, priority) sorts the whole table. Each index ends in id, the keyset's
// tie-breaker, so a page (and a deep cursor) is one index range. The audit
// log's `sort=action` gets the same (its varchar_pattern_ops index serves
// prefix filters only, not ORDER BY).
export class Migration0018CdnListIndexes extends Migration {
  override async up(): Promise<void> {
    for (const table of ['cdn_endpoint', 'cdn_origin', 'cdn_route', 'cdn_cache_rule']) {
      this.addSql(`create index ${table}_updated_at_idx on ${table} (updated_at, id)`);
      this.addSql(`create index ${table}_name_idx on ${table} (name, id)`);
    }
    this.addSql(`create index cdn_origin_host_idx on cdn_origin (host, id)`);
    this.addSql(`create index cdn_route_priority_idx on cdn_route (priority, id)`);
    this.addSql(`create index cdn_cache_rule_priority_idx on cdn_cache_rule (priority, id)`);
    this.addSql(`create index audit_log_action_sort_idx on audit_log (action, id)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists audit_log_action_sort_idx`);
    for (const name of ['cdn_cache_rule_priority_idx', 'cdn_route_priority_idx', 'cdn_origin_host_idx']) this.addSql(`drop index if exists ${name}`);
    for (const table of ['cdn_endpoint', 'cdn_origin', 'cdn_route', 'cdn_cache_rule']) {
      this.addSql(`drop index if exists ${table}_name_idx`);
      this.addSql(`drop index if exists ${table}_updated_at_idx`);
    }
  }
}
