import { Migration } from '@mikro-orm/migrations';

// Purge acknowledgements counted as they are stored, and kept for a while
// only (edge/channel-purges.ts): a flush of acks adds to a purge's counts
// instead of counting every ack of the purge again (edge_nodes_failed joins
// edge_nodes_completed), and the acks of a purge finished long ago are
// deleted (acks_pruned_at; its counts stay on the record). An agent whose
// cache is empty starts at the oldest purge still open (an index of those).
export class Migration0024PurgeAckCounts extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_purge_request add column edge_nodes_failed int not null default 0`);
    this.addSql(`alter table cdn_purge_request add column acks_pruned_at timestamptz null`);
    this.addSql(`update cdn_purge_request p set edge_nodes_failed = f.n
      from (select purge_id, count(*)::int as n from cdn_purge_ack where not ok group by purge_id) f where p.id = f.purge_id`);
    // The retention sweep's queue: finished purges whose acks are still stored, oldest first.
    this.addSql(`create index cdn_purge_request_ack_retention_idx on cdn_purge_request (completed_at) where acks_pruned_at is null and completed_at is not null`);
    // Where an agent with an empty cache starts: the oldest purge still open.
    this.addSql(`create index cdn_purge_request_open_idx on cdn_purge_request (sequence) where status in ('pending', 'in_progress')`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists cdn_purge_request_open_idx`);
    this.addSql(`drop index if exists cdn_purge_request_ack_retention_idx`);
    this.addSql(`alter table cdn_purge_request drop column if exists acks_pruned_at`);
    this.addSql(`alter table cdn_purge_request drop column if exists edge_nodes_failed`);
  }
}
