import { Migration } from '@mikro-orm/migrations';

// Log drain lists (document 3 §4.10; cdn/policies.entities.ts): the full-text
// `q` over names (a frozen copy of cdn.entities.ts's searchDocument, as the
// other CDN lists have it) and the `status` filter, newest first.
export class Migration0016CdnLogDrains extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create index cdn_log_drain_status_idx on cdn_log_drain (status, created_at, id)`);
    this.addSql(`create index cdn_log_drain_search_idx on cdn_log_drain using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g'))))`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists cdn_log_drain_search_idx`);
    this.addSql(`drop index if exists cdn_log_drain_status_idx`);
  }
}
