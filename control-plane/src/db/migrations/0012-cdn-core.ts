import { Migration } from '@mikro-orm/migrations';

// The CDN's working configuration (document 3 §2; cdn/cdn.entities.ts):
// endpoints (distributions), origins, routes and cache rules, each with a GIN
// full-text index for the lists' `q` (the same expressions as cdn/cdn.entities.ts's searchDocument, which
// the lists' queries use; a migration keeps its own frozen copy).
export class Migration0012CdnCore extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_endpoint (
        id uuid primary key,
        name varchar(100) not null,
        default_origin_id uuid not null,
        hostname varchar(253) not null,
        status text check (status in ('deploying', 'active', 'disabled', 'error')) not null,
        http_version text check (http_version in ('http1.1', 'http2', 'http2and3')) not null,
        ipv6_enabled boolean not null,
        response_headers_policy_id uuid null,
        tls_config jsonb not null,
        compression jsonb not null,
        geo_restriction jsonb not null,
        custom_error_pages jsonb not null,
        shield_region varchar(64) null,
        tags jsonb not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_endpoint_hostname_key unique (hostname)
      )`);
    this.addSql(`create index cdn_endpoint_created_at_idx on cdn_endpoint (created_at, id)`);
    this.addSql(`create index cdn_endpoint_search_idx on cdn_endpoint using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || hostname || ' ' || regexp_replace(hostname, '[^[:alnum:]]+', ' ', 'g')) || jsonb_to_tsvector('simple'::regconfig, tags, '["string"]'::jsonb)))`);

    this.addSql(`
      create table cdn_origin (
        id uuid primary key,
        distribution_id uuid null,
        name varchar(100) not null,
        scheme text check (scheme in ('http', 'https')) not null,
        host varchar(253) not null,
        port int not null,
        path_prefix varchar(2048) not null,
        enabled boolean not null,
        health_status text check (health_status in ('healthy', 'degraded', 'unhealthy', 'unknown')) not null,
        health_check_url varchar(2048) null,
        health_check_interval_seconds int not null,
        verify_tls boolean not null,
        allow_private_network boolean not null,
        ssrf_protection boolean not null,
        timeout_ms int not null,
        connect_timeout_ms int not null,
        max_retries smallint not null,
        retry_on jsonb not null,
        forward_host_header boolean not null,
        custom_headers jsonb not null,
        tags jsonb not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table cdn_origin add constraint cdn_origin_distribution_id_foreign foreign key (distribution_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_origin_created_at_idx on cdn_origin (created_at, id)`);
    this.addSql(`create index cdn_origin_distribution_idx on cdn_origin (distribution_id, created_at)`);
    this.addSql(`create index cdn_origin_search_idx on cdn_origin using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g') || ' ' || host || ' ' || regexp_replace(host, '[^[:alnum:]]+', ' ', 'g')) || jsonb_to_tsvector('simple'::regconfig, tags, '["string"]'::jsonb)))`);

    this.addSql(`
      create table cdn_route (
        id uuid primary key,
        distribution_id uuid not null,
        origin_id uuid not null,
        name varchar(100) not null,
        enabled boolean not null,
        priority int not null,
        match jsonb not null,
        strip_prefix varchar(2048) null,
        response_headers_policy_id uuid null,
        redirect_rules jsonb not null,
        compression_enabled boolean null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table cdn_route add constraint cdn_route_distribution_id_foreign foreign key (distribution_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`alter table cdn_route add constraint cdn_route_origin_id_foreign foreign key (origin_id) references cdn_origin (id) on delete restrict`);
    this.addSql(`create index cdn_route_created_at_idx on cdn_route (created_at, id)`);
    this.addSql(`create index cdn_route_distribution_idx on cdn_route (distribution_id, priority)`);
    this.addSql(`create index cdn_route_origin_idx on cdn_route (origin_id)`);
    this.addSql(`create index cdn_route_search_idx on cdn_route using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g'))))`);

    this.addSql(`
      create table cdn_cache_rule (
        id uuid primary key,
        distribution_id uuid not null,
        name varchar(100) not null,
        enabled boolean not null,
        priority int not null,
        match jsonb not null,
        ttl_seconds int not null,
        browser_ttl_seconds int null,
        cache_key jsonb not null,
        bypass jsonb not null,
        stale_while_revalidate_seconds int null,
        stale_if_error_seconds int null,
        cache_status_header boolean not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table cdn_cache_rule add constraint cdn_cache_rule_distribution_id_foreign foreign key (distribution_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_cache_rule_created_at_idx on cdn_cache_rule (created_at, id)`);
    this.addSql(`create index cdn_cache_rule_distribution_idx on cdn_cache_rule (distribution_id, priority)`);
    this.addSql(`create index cdn_cache_rule_search_idx on cdn_cache_rule using gin ((to_tsvector('simple'::regconfig, name || ' ' || regexp_replace(name, '[^[:alnum:]]+', ' ', 'g'))))`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists cdn_cache_rule`);
    this.addSql(`drop table if exists cdn_route`);
    this.addSql(`drop table if exists cdn_origin`);
    this.addSql(`drop table if exists cdn_endpoint`);
  }
}
