import { Migration } from '@mikro-orm/migrations';

// The control channel's bookkeeping (edge/channel-*.ts, edge/nodes-*.ts): the
// edge nodes agents register on Hello (their applied configuration version,
// refused version and purge sequence), each node's acknowledgement of each
// purge, each targeted node's result of each prefetch job, and each node's
// latest probe of each origin (aggregated worst-case on read).
export class Migration0022EdgeChannel extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_edge_node (
        id uuid primary key,
        hostname text not null,
        region text not null,
        status text check (status in ('online', 'offline', 'draining')) not null,
        agent_version text not null,
        config_version bigint not null default '0',
        failed_config_version bigint null,
        config_error text null,
        purge_sequence bigint not null default '0',
        last_seen_at timestamptz null,
        connected_at timestamptz null,
        replica_id text null,
        agent_token_id uuid null,
        cache_objects bigint not null default '0',
        cache_bytes bigint not null default '0',
        created_at timestamptz not null,
        updated_at timestamptz not null
      )`);
    this.addSql(`create index cdn_edge_node_hostname_idx on cdn_edge_node (hostname, id)`);
    this.addSql(`create index cdn_edge_node_status_idx on cdn_edge_node (status, last_seen_at)`);

    this.addSql(`
      create table cdn_purge_ack (
        purge_id uuid not null,
        node_id uuid not null,
        ok boolean not null,
        error text null,
        acked_at timestamptz not null,
        constraint cdn_purge_ack_pkey primary key (purge_id, node_id)
      )`);
    this.addSql(`alter table cdn_purge_ack add constraint cdn_purge_ack_purge_id_foreign foreign key (purge_id) references cdn_purge_request (id) on update cascade on delete cascade`);
    this.addSql(`alter table cdn_purge_ack add constraint cdn_purge_ack_node_id_foreign foreign key (node_id) references cdn_edge_node (id) on update cascade on delete cascade`);

    this.addSql(`
      create table cdn_prefetch_result (
        job_id uuid not null,
        node_id uuid not null,
        state text check (state in ('sent', 'done')) not null,
        fetched int not null default 0,
        failed int not null default 0,
        failed_urls jsonb not null,
        error text null,
        sent_at timestamptz not null,
        acked_at timestamptz null,
        constraint cdn_prefetch_result_pkey primary key (job_id, node_id)
      )`);
    this.addSql(`alter table cdn_prefetch_result add constraint cdn_prefetch_result_job_id_foreign foreign key (job_id) references cdn_prefetch_job (id) on update cascade on delete cascade`);
    this.addSql(`alter table cdn_prefetch_result add constraint cdn_prefetch_result_node_id_foreign foreign key (node_id) references cdn_edge_node (id) on update cascade on delete cascade`);

    this.addSql(`
      create table cdn_origin_health (
        origin_id uuid not null,
        node_id uuid not null,
        status text not null,
        latency_ms int null,
        last_success_at timestamptz null,
        last_failure_at timestamptz null,
        failure_reason text null,
        consecutive_failures int not null default 0,
        checked_at timestamptz null,
        constraint cdn_origin_health_status_check check (status in ('healthy', 'degraded', 'unhealthy', 'unknown')),
        constraint cdn_origin_health_pkey primary key (origin_id, node_id)
      )`);
    this.addSql(`alter table cdn_origin_health add constraint cdn_origin_health_origin_id_foreign foreign key (origin_id) references cdn_origin (id) on update cascade on delete cascade`);
    this.addSql(`alter table cdn_origin_health add constraint cdn_origin_health_node_id_foreign foreign key (node_id) references cdn_edge_node (id) on update cascade on delete cascade`);
    this.addSql(`create index cdn_origin_health_node_idx on cdn_origin_health (node_id)`);
  }

  override async down(): Promise<void> {
    for (const table of ['cdn_origin_health', 'cdn_prefetch_result', 'cdn_purge_ack', 'cdn_edge_node']) this.addSql(`drop table if exists ${table}`);
  }
}
