import { Migration } from '@mikro-orm/migrations';

// An endpoint reads `error` while an online edge node refuses its latest
// change (issue 21 item 8), with the reason in status_reason. Like its status,
// the reason is observed state, not configuration: the revision trigger of
// migration 0021 ignores it (a change of it compiles nothing).
export class Migration0039EndpointStatusReason extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_endpoint add column status_reason text null`);
    this.addSql(`drop trigger if exists cdn_endpoint_config_update on cdn_endpoint`);
    this.addSql(`create trigger cdn_endpoint_config_update after update on cdn_endpoint referencing old table as old_rows new table as new_rows
      for each statement execute function cdn_config_changed('updated_at', 'version', 'status', 'status_reason')`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop trigger if exists cdn_endpoint_config_update on cdn_endpoint`);
    this.addSql(`create trigger cdn_endpoint_config_update after update on cdn_endpoint referencing old table as old_rows new table as new_rows
      for each statement execute function cdn_config_changed('updated_at', 'version', 'status')`);
    this.addSql(`alter table cdn_endpoint drop column if exists status_reason`);
  }
}
