import { Migration } from '@mikro-orm/migrations';

// The Idempotency-Key of a purge submission is claimed by the purge row itself
// (issue 21 item 10): stored in the statement that inserts the purge, so a
// purge costs no round trip to the shared store for it. The key is the
// caller and the key's hash; the fingerprint is the request's (method, path,
// body). A key is honoured for 24 hours (older claims are released on reuse).
export class Migration0047PurgeIdempotency extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_purge_request add column idempotency_key text null, add column request_fingerprint text null`);
    this.addSql(`alter table cdn_purge_request add constraint cdn_purge_request_idempotency_key_key unique (idempotency_key)`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_purge_request drop constraint cdn_purge_request_idempotency_key_key`);
    this.addSql(`alter table cdn_purge_request drop column idempotency_key, drop column request_fingerprint`);
  }
}
