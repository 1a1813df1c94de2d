import { Migration } from '@mikro-orm/migrations';

// CDN slice 4 (document 3 §2 "Purge request", "Prefetch job", "Custom domain";
// cdn/purge-entity.ts, cdn/prefetch-entity.ts, cdn/domain-entity.ts): purges
// numbered by one platform-wide sequence, prefetch jobs, custom domains with
// their certificates (private keys sealed), and the internal CA that issues
// managed certificates when no ACME directory is configured.
export class Migration0015CdnDomains extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create sequence cdn_purge_sequence as bigint start 1`);
    this.addSql(`
      create table cdn_purge_request (
        id uuid primary key,
        distribution_id uuid not null,
        sequence bigint not null,
        purge_type text check (purge_type in ('path', 'wildcard', 'tag', 'all')) not null,
        paths jsonb not null,
        tags jsonb not null,
        status text check (status in ('pending', 'in_progress', 'completed', 'failed')) not null,
        edge_nodes_total int not null,
        edge_nodes_completed int not null,
        submitted_by uuid null,
        completed_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        constraint cdn_purge_request_sequence_key unique (sequence)
      )`);
    this.addSql(`alter table cdn_purge_request add constraint cdn_purge_request_distribution_id_foreign foreign key (distribution_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_purge_request_created_at_idx on cdn_purge_request (created_at, id)`);
    this.addSql(`create index cdn_purge_request_distribution_idx on cdn_purge_request (distribution_id, created_at)`);

    this.addSql(`
      create table cdn_prefetch_job (
        id uuid primary key,
        endpoint_id uuid not null,
        urls jsonb not null,
        priority text check (priority in ('low', 'normal', 'high')) not null,
        status text check (status in ('pending', 'in_progress', 'completed', 'failed')) not null,
        total int not null,
        fetched int not null,
        failed int not null,
        failed_urls jsonb not null,
        submitted_by uuid null,
        completed_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null
      )`);
    this.addSql(`alter table cdn_prefetch_job add constraint cdn_prefetch_job_endpoint_id_foreign foreign key (endpoint_id) references cdn_endpoint (id) on delete cascade`);
    this.addSql(`create index cdn_prefetch_job_endpoint_idx on cdn_prefetch_job (endpoint_id, created_at)`);

    this.addSql(`
      create table cdn_custom_domain (
        id uuid primary key,
        endpoint_id uuid not null,
        hostname varchar(253) not null,
        certificate_source text check (certificate_source in ('managed', 'custom')) not null,
        certificate_status text check (certificate_status in ('pending_validation', 'provisioning', 'active', 'expiring_soon', 'expired', 'failed')) not null,
        certificate_expires_at timestamptz null,
        certificate_issuer text check (certificate_issuer in ('custom', 'internal_ca', 'acme')) null,
        certificate_fingerprint varchar(95) null,
        certificate_pem text null,
        private_key_sealed text null,
        previous_certificate_pem text null,
        previous_private_key_sealed text null,
        previous_retires_at timestamptz null,
        dns_validation jsonb null,
        validation_error varchar(500) null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_custom_domain_hostname_key unique (hostname)
      )`);
    this.addSql(`alter table cdn_custom_domain add constraint cdn_custom_domain_endpoint_id_foreign foreign key (endpoint_id) references cdn_endpoint (id) on delete restrict`);
    this.addSql(`create index cdn_custom_domain_endpoint_idx on cdn_custom_domain (endpoint_id, created_at, id)`);
    this.addSql(`create index cdn_custom_domain_expiry_idx on cdn_custom_domain (certificate_expires_at)`);

    this.addSql(`
      create table cdn_internal_ca (
        id smallint primary key,
        certificate_pem text not null,
        private_key_sealed text not null,
        created_at timestamptz not null
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists cdn_internal_ca`);
    this.addSql(`drop table if exists cdn_custom_domain`);
    this.addSql(`drop table if exists cdn_prefetch_job`);
    this.addSql(`drop table if exists cdn_purge_request`);
    this.addSql(`drop sequence if exists cdn_purge_sequence`);
  }
}
