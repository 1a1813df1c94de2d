import { Migration } from '@mikro-orm/migrations';

export class Migration0001Foundation extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table audit_log (
        id uuid primary key default gen_random_uuid(),
        action varchar(200) not null,
        actor_id uuid null,
        actor_type varchar(20) not null,
        actor_role varchar(50) null,
        resource_type varchar(100) not null,
        resource_id varchar(100) null,
        ip_address varchar(64) null,
        user_agent varchar(512) null,
        request_id varchar(128) null,
        metadata jsonb not null default '{}',
        created_at timestamptz not null
      )`);
    this.addSql(`create index audit_log_created_at_idx on audit_log (created_at desc, id desc)`);
    this.addSql(`create index audit_log_resource_idx on audit_log (resource_type, resource_id)`);
    this.addSql(`create index audit_log_actor_idx on audit_log (actor_id)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists audit_log`);
  }
}
