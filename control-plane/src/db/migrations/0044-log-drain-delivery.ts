import { Migration } from '@mikro-orm/migrations';

// Log drain delivery as the edge nodes report it (issue 24 item 2): each
// node's state of each drain (cdn_log_drain_node, upserted from heartbeats,
// raw SQL only), and on the drain its status (`error` while an online node
// fails to deliver), last_error and the records the nodes dropped. Those are
// observed state, not configuration: the revision trigger of migration 0021
// now ignores a drain's status unless it moves to or from `paused` (what the
// edge does with it), and records_dropped.
const CHANGED_BODY = (drainCase: boolean) => `
      begin
        if TG_OP = 'INSERT' then
          if not exists (select 1 from new_rows) then return null; end if;
        elsif TG_OP = 'DELETE' then
          if not exists (select 1 from old_rows) then return null; end if;
        elsif not exists (
          select 1 from new_rows n full join old_rows o on o.id = n.id
          where o.id is null or n.id is null
            or (to_jsonb(n) - TG_ARGV) is distinct from (to_jsonb(o) - TG_ARGV)
            or (TG_TABLE_NAME = 'cdn_endpoint' and ((to_jsonb(n) ->> 'status') = 'disabled') is distinct from ((to_jsonb(o) ->> 'status') = 'disabled'))${drainCase ? `
            or (TG_TABLE_NAME = 'cdn_log_drain' and ((to_jsonb(n) ->> 'status') = 'paused') is distinct from ((to_jsonb(o) ->> 'status') = 'paused'))` : ''}
        ) then
          return null;
        end if;
        update cdn_config_revision set revision = revision + 1 where id = 1;
        return null;
      end`;

export class Migration0044LogDrainDelivery extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_log_drain add column records_dropped bigint not null default '0'`);
    this.addSql(`
      create table cdn_log_drain_node (
        drain_id uuid not null references cdn_log_drain (id) on delete cascade,
        node_id uuid not null references cdn_edge_node (id) on delete cascade,
        status text not null,
        last_error text null,
        records_shipped bigint not null,
        records_dropped bigint not null,
        batches_sent bigint not null,
        buffered_bytes bigint not null,
        last_delivered_at timestamptz null,
        reported_at timestamptz not null,
        primary key (drain_id, node_id)
      )`);
    this.addSql(`create index cdn_log_drain_node_node_idx on cdn_log_drain_node (node_id)`);
    this.addSql(`create or replace function cdn_config_changed() returns trigger language plpgsql as $$${CHANGED_BODY(true)} $$`);
    this.addSql(`drop trigger if exists cdn_log_drain_config_update on cdn_log_drain`);
    this.addSql(`create trigger cdn_log_drain_config_update after update on cdn_log_drain referencing old table as old_rows new table as new_rows
      for each statement execute function cdn_config_changed('updated_at', 'version', 'last_error', 'status', 'records_dropped')`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop trigger if exists cdn_log_drain_config_update on cdn_log_drain`);
    this.addSql(`create trigger cdn_log_drain_config_update after update on cdn_log_drain referencing old table as old_rows new table as new_rows
      for each statement execute function cdn_config_changed('updated_at', 'version', 'last_error')`);
    this.addSql(`create or replace function cdn_config_changed() returns trigger language plpgsql as $$${CHANGED_BODY(false)} $$`);
    this.addSql(`drop table if exists cdn_log_drain_node`);
    this.addSql(`alter table cdn_log_drain drop column if exists records_dropped`);
  }
}
