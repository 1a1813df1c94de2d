import { Migration } from '@mikro-orm/migrations';

// A cache rule's negative-caching TTL (issue 21 item 9): error answers the
// origin gives no explicit freshness for are kept this long instead of the
// rule's ttl_seconds (10 s by default, as CloudFront's error caching).
export class Migration0040CacheRuleNegativeTtl extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_cache_rule add column negative_ttl_seconds int not null default 10`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_cache_rule drop column if exists negative_ttl_seconds`);
  }
}
