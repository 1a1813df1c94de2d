import { Migration } from '@mikro-orm/migrations';

// The CDN's policies (document 3 §2; cdn/policies.entities.ts): response
// headers policies (with the lists' full-text `q`, a frozen copy of
// cdn.entities.ts's searchDocument), signing keys and IP access rules of an
// endpoint, and log drains. Secrets are stored sealed (text columns).
export class Migration0014CdnPolicies extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_response_headers_policy (
        id uuid primary key,
        name varchar(100) not null,
        description varchar(500) not null,
        cors jsonb not null,
        security_headers jsonb not null,
        custom_response_headers jsonb not null,
        custom_request_headers jsonb not null,
        remove_response_headers jsonb not null,
        remove_request_headers jsonb not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`create index cdn_response_headers_policy_created_at_idx on cdn_response_headers_policy (created_at, id)`);
    this.addSql(`create index cdn_response_headers_policy_search_idx on cdn_response_headers_policy using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || description || ' ' || regexp_replace(description, '[^[:alnum:]]+', ' ', 'g'))))`);

    this.addSql(`
      create table cdn_signing_key (
        id uuid primary key,
        endpoint_id uuid not null,
        name varchar(100) not null,
        algorithm text check (algorithm in ('HMAC-SHA256', 'HMAC-SHA512')) not null,
        status text check (status in ('active')) not null,
        secret_sealed text not null,
        retired_secrets jsonb not null,
        token_param varchar(64) not null,
        expires_param varchar(64) not null,
        ip_binding_enabled boolean not null,
        rotated_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table cdn_signing_key add constraint cdn_signing_key_endpoint_id_foreign foreign key (endpoint_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_signing_key_endpoint_idx on cdn_signing_key (endpoint_id, created_at, id)`);

    this.addSql(`
      create table cdn_ip_rule (
        id uuid primary key,
        endpoint_id uuid not null,
        action text check (action in ('allow', 'block', 'challenge')) not null,
        cidr varchar(49) not null,
        description varchar(255) null,
        priority int not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_ip_rule_endpoint_cidr_key unique (endpoint_id, cidr)
      )`);
    this.addSql(`alter table cdn_ip_rule add constraint cdn_ip_rule_endpoint_id_foreign foreign key (endpoint_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_ip_rule_endpoint_idx on cdn_ip_rule (endpoint_id, created_at, id)`);

    this.addSql(`
      create table cdn_log_drain (
        id uuid primary key,
        name varchar(100) not null,
        destination_type text check (destination_type in ('s3', 'datadog', 'elasticsearch', 'http', 'gcs')) not null,
        destination_config jsonb not null,
        destination_secrets_sealed text not null,
        log_format text check (log_format in ('json', 'ndjson', 'w3c_extended')) not null,
        fields jsonb not null,
        endpoint_ids jsonb not null,
        status text check (status in ('active', 'paused', 'error')) not null,
        last_error varchar(1000) null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`create index cdn_log_drain_created_at_idx on cdn_log_drain (created_at, id)`);
    this.addSql(`create index cdn_log_drain_endpoint_ids_idx on cdn_log_drain using gin (endpoint_ids jsonb_path_ops)`);

    // Token authentication of an endpoint: signed URLs required (needs an active signing key).
    this.addSql(`alter table cdn_endpoint add column token_auth_enabled boolean not null default false`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_endpoint drop column token_auth_enabled`);
    this.addSql(`drop table if exists cdn_log_drain`);
    this.addSql(`drop table if exists cdn_ip_rule`);
    this.addSql(`drop table if exists cdn_signing_key`);
    this.addSql(`drop table if exists cdn_response_headers_policy`);
  }
}
