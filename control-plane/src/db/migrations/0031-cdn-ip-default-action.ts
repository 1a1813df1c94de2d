import { Migration } from '@mikro-orm/migrations';

// An endpoint's ip_default_action (document 3 §4.9: "a default-deny policy"):
// what the edge does with a viewer no IP access rule holds; `deny` refuses
// them. The edge snapshot has carried the field since the control channel;
// the compiler sent 'allow' until this column existed.
export class Migration0031CdnIpDefaultAction extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_endpoint add column ip_default_action text check (ip_default_action in ('allow', 'deny')) not null default 'allow'`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_endpoint drop column if exists ip_default_action`);
  }
}
