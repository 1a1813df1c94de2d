import { Migration } from '@mikro-orm/migrations';

// Personal-data exports and account deletion requests (document 1 §2, §3,
// §4.1; accounts/data-export.entity.ts, accounts/deletion-request.entity.ts),
// and an index that finds the audit entries about a user's resources
// (metadata.user_id) for the export and the erasure.
export class Migration0009ExportAndDeletion extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table account_data_export (
        id uuid primary key,
        user_id uuid not null,
        status text check (status in ('pending', 'processing', 'ready', 'failed')) not null default 'pending',
        requested_at timestamptz not null,
        completed_at timestamptz null,
        expires_at timestamptz null,
        file_name varchar(64) null,
        size_bytes bigint null,
        error varchar(500) null
      )`);
    this.addSql(`alter table account_data_export add constraint account_data_export_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index account_data_export_user_idx on account_data_export (user_id, requested_at)`);
    this.addSql(`create unique index account_data_export_one_open on account_data_export (user_id) where status in ('pending', 'processing')`);
    this.addSql(`create index account_data_export_expiry_idx on account_data_export (expires_at) where file_name is not null`);

    this.addSql(`
      create table account_deletion_request (
        id uuid primary key,
        user_id uuid not null,
        status text check (status in ('pending', 'canceled', 'completed')) not null default 'pending',
        reason varchar(500) null,
        requested_at timestamptz not null,
        scheduled_deletion_at timestamptz not null,
        canceled_at timestamptz null,
        completed_at timestamptz null
      )`);
    this.addSql(`alter table account_deletion_request add constraint account_deletion_request_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index account_deletion_request_user_idx on account_deletion_request (user_id, requested_at)`);
    this.addSql(`create unique index account_deletion_request_one_pending on account_deletion_request (user_id) where status = 'pending'`);
    this.addSql(`create index account_deletion_request_due_idx on account_deletion_request (scheduled_deletion_at) where status = 'pending'`);

    this.addSql(`create index audit_log_metadata_user_idx on audit_log ((metadata->>'user_id')) where (metadata->>'user_id') is not null`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists audit_log_metadata_user_idx`);
    this.addSql(`drop table if exists account_deletion_request`);
    this.addSql(`drop table if exists account_data_export`);
  }
}
