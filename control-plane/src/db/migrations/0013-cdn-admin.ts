import { Migration } from '@mikro-orm/migrations';

// CDN administration (document 3 §2, §4.11; cdn-admin/): machine API tokens,
// stored only as keyed hashes, and indexes for the audit-log filters the CDN
// audit list offers (action patterns, resource types in time order).
export class Migration0013CdnAdmin extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_api_token (
        id uuid primary key,
        name varchar(100) not null,
        role text check (role in ('viewer', 'operator', 'admin')) not null,
        status text check (status in ('active', 'revoked')) not null default 'active',
        token_hash varchar(64) not null,
        last_used_at timestamptz null,
        expires_at timestamptz null,
        revoked_at timestamptz null,
        created_by uuid null,
        replaced_by uuid null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_api_token_hash_key unique (token_hash)
      )`);
    this.addSql(`create index cdn_api_token_created_at_idx on cdn_api_token (created_at, id)`);
    this.addSql(`create index cdn_api_token_status_idx on cdn_api_token (status)`);

    // `action=origin.*` is a prefix match (LIKE 'origin.%'): pattern operators serve it whatever the collation.
    this.addSql(`create index audit_log_action_idx on audit_log (action varchar_pattern_ops)`);
    // The CDN list reads the entries of a set of resource types, newest first.
    this.addSql(`create index audit_log_resource_type_created_at_idx on audit_log (resource_type, created_at desc, id desc)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists audit_log_resource_type_created_at_idx`);
    this.addSql(`drop index if exists audit_log_action_idx`);
    this.addSql(`drop table if exists cdn_api_token`);
  }
}
