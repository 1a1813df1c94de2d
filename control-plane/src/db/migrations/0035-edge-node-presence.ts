import { Migration } from '@mikro-orm/migrations';

// A node's presence, its current stream and the one before (issue 21 item 5):
// a purge must be applied by the nodes online when it was stored, so a node
// that drops out stays one of its targets, also once it is back and catching
// up, instead of no longer holding the purge back. offline_at: when the node
// last went offline (or its stream was replaced); previous_connected_at: when
// the stream before its current one opened.
export class Migration0035EdgeNodePresence extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_edge_node add column offline_at timestamptz null`);
    this.addSql(`alter table cdn_edge_node add column previous_connected_at timestamptz null`);
    // A node offline before this migration went offline at its last sighting, at the latest.
    this.addSql(`update cdn_edge_node set offline_at = coalesce(last_seen_at, updated_at) where status = 'offline'`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_edge_node drop column if exists previous_connected_at`);
    this.addSql(`alter table cdn_edge_node drop column if exists offline_at`);
  }
}
