import { Migration } from '@mikro-orm/migrations';

// A node's failure for a purge is either its own report (the agent could not
// apply it) or the control plane's record that it did not answer within
// EDGE_PURGE_TIMEOUT_MS (failLatePurges). Only the second is undone by the
// node's purge sequence reaching the purge's: a late node whose
// acknowledgement never arrived (its stream was gone) or that came back with
// an empty cache has applied it, and the purge moves on to completed. The
// partial index holds the few timed-out failures the tick looks through.
export class Migration0049PurgeAckTimedOut extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_purge_ack add column timed_out boolean not null default false`);
    this.addSql(`create index cdn_purge_ack_timed_out_idx on cdn_purge_ack (node_id) where timed_out`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists cdn_purge_ack_timed_out_idx`);
    this.addSql(`alter table cdn_purge_ack drop column timed_out`);
  }
}
