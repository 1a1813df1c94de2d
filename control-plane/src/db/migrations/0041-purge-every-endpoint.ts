import { Migration } from '@mikro-orm/migrations';

// A top-level purge naming no distribution and no URL applies to every
// endpoint (issue 21 item 9): its distribution_id is null.
export class Migration0041PurgeEveryEndpoint extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_purge_request alter column distribution_id drop not null`);
  }

  override async down(): Promise<void> {
    this.addSql(`delete from cdn_purge_request where distribution_id is null`);
    this.addSql(`alter table cdn_purge_request alter column distribution_id set not null`);
  }
}
