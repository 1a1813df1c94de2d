import { Migration } from '@mikro-orm/migrations';

// Soft purges (Fastly's): what a soft purge names is marked stale at the edge, revalidated before its next use,
// instead of removed. The purge record says which it was.
export class Migration0050SoftPurge extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_purge_request add column soft boolean not null default false`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_purge_request drop column soft`);
  }
}
