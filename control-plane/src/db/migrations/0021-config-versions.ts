import { Migration } from '@mikro-orm/migrations';

// Configuration versions (document 3 §2 "Configuration version", §4.12;
// DESIGN.md §5, §7; edge/config-*.ts): every compiled version with its
// manifest (resource key → [version it last changed in, sha256]), the
// resource bodies content-addressed by sha256 (sealed: they hold signing
// secrets, private keys and drain credentials), and the revision counter of
// the working configuration that CDN_PUBLISH_MODE=auto polls.
//
// The counter: every write to a configuration table first locks the single
// cdn_config_revision row (a BEFORE statement trigger, so the lock is taken
// before any row lock of that table and writers cannot deadlock on it), and
// an AFTER statement trigger bumps `revision` when a row's content changed,
// ignoring the columns the edge never sees that move often (endpoint status
// other than to or from `disabled`, origin health, timestamps, the optimistic
// lock version, a domain's validation bookkeeping, a drain's last error). The
// bump commits with the write, so a compile that holds the same lock sees a
// configuration and a revision that agree.
const CONFIG_TABLES: Record<string, string[]> = {
  cdn_endpoint: ['status'],
  cdn_origin: ['health_status'],
  cdn_route: [],
  cdn_cache_rule: [],
  cdn_response_headers_policy: [],
  cdn_signing_key: [],
  cdn_ip_rule: [],
  cdn_custom_domain: ['certificate_status', 'validation_error', 'dns_validation', 'acme_order'],
  cdn_log_drain: ['last_error'],
};
const ALWAYS_IGNORED = ['updated_at', 'version'];
const args = (columns: string[]) => [...ALWAYS_IGNORED, ...columns].map((c) => `'${c}'`).join(', ');

export class Migration0021ConfigVersions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create sequence cdn_config_version_number_seq as bigint start 1`);
    this.addSql(`
      create table cdn_config_version (
        id uuid primary key,
        version_number bigint not null,
        description varchar(500) not null,
        status text check (status in ('draft', 'validating', 'valid', 'invalid', 'publishing', 'active', 'superseded', 'rolled_back')) not null,
        validation_errors jsonb not null,
        manifest jsonb null,
        digest varchar(64) not null,
        resource_count int not null,
        config_revision bigint not null,
        propagation_final jsonb null,
        propagation_completed_at timestamptz null,
        published_by uuid null,
        published_at timestamptz null,
        rollback_target_id uuid null,
        rollback_reason varchar(500) null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_config_version_number_key unique (version_number)
      )`);
    this.addSql(`create unique index cdn_config_version_active_idx on cdn_config_version (status) where status = 'active'`);
    this.addSql(`create index cdn_config_version_status_idx on cdn_config_version (status, version_number)`);

    this.addSql(`
      create table cdn_config_resource (
        sha256 varchar(64) primary key,
        body bytea not null,
        created_at timestamptz not null
      )`);

    this.addSql(`
      create table cdn_config_revision (
        id smallint primary key,
        revision bigint not null,
        compiled_revision bigint not null
      )`);
    this.addSql(`insert into cdn_config_revision (id, revision, compiled_revision) values (1, 1, 0)`);

    this.addSql(`
      create function cdn_config_lock() returns trigger language plpgsql as $$
      begin
        perform 1 from cdn_config_revision where id = 1 for no key update;
        return null;
      end $$`);
    // TG_ARGV: the columns whose changes alone do not change the configuration.
    this.addSql(`
      create function cdn_config_changed() returns trigger language plpgsql as $$
      begin
        if TG_OP = 'INSERT' then
          if not exists (select 1 from new_rows) then return null; end if;
        elsif TG_OP = 'DELETE' then
          if not exists (select 1 from old_rows) then return null; end if;
        elsif not exists (
          select 1 from new_rows n full join old_rows o on o.id = n.id
          where o.id is null or n.id is null
            or (to_jsonb(n) - TG_ARGV) is distinct from (to_jsonb(o) - TG_ARGV)
            or (TG_TABLE_NAME = 'cdn_endpoint' and ((to_jsonb(n) ->> 'status') = 'disabled') is distinct from ((to_jsonb(o) ->> 'status') = 'disabled'))
        ) then
          return null;
        end if;
        update cdn_config_revision set revision = revision + 1 where id = 1;
        return null;
      end $$`);
    for (const [table, ignored] of Object.entries(CONFIG_TABLES)) {
      this.addSql(`create trigger ${table}_config_lock before insert or update or delete on ${table} for each statement execute function cdn_config_lock()`);
      this.addSql(`create trigger ${table}_config_insert after insert on ${table} referencing new table as new_rows for each statement execute function cdn_config_changed(${args([])})`);
      this.addSql(`create trigger ${table}_config_update after update on ${table} referencing old table as old_rows new table as new_rows for each statement execute function cdn_config_changed(${args(ignored)})`);
      this.addSql(`create trigger ${table}_config_delete after delete on ${table} referencing old table as old_rows for each statement execute function cdn_config_changed(${args([])})`);
    }
  }

  override async down(): Promise<void> {
    for (const table of Object.keys(CONFIG_TABLES)) {
      for (const suffix of ['lock', 'insert', 'update', 'delete']) this.addSql(`drop trigger if exists ${table}_config_${suffix} on ${table}`);
    }
    this.addSql(`drop function if exists cdn_config_changed()`);
    this.addSql(`drop function if exists cdn_config_lock()`);
    this.addSql(`drop table if exists cdn_config_revision`);
    this.addSql(`drop table if exists cdn_config_resource`);
    this.addSql(`drop table if exists cdn_config_version`);
    this.addSql(`drop sequence if exists cdn_config_version_number_seq`);
  }
}
