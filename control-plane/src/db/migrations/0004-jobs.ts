import { Migration } from '@mikro-orm/migrations';

// Background jobs (control-plane/src/jobs/): the job table workers claim from
// with FOR UPDATE SKIP LOCKED, and the recurring schedules.
export class Migration0004Jobs extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table job (
        id uuid primary key,
        type varchar(100) not null,
        payload jsonb not null,
        state text check (state in ('queued', 'running', 'succeeded', 'failed')) not null default 'queued',
        run_at timestamptz not null,
        attempts int not null default 0,
        max_attempts int not null,
        lease_ms int not null,
        unique_key varchar(200) null,
        claim_token uuid null,
        locked_by varchar(200) null,
        lease_expires_at timestamptz null,
        last_error text null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        started_at timestamptz null,
        finished_at timestamptz null
      )`);
    this.addSql(`create index job_due_idx on job (run_at, id) where state = 'queued'`);
    this.addSql(`create index job_lease_idx on job (lease_expires_at) where state = 'running'`);
    this.addSql(`create index job_finished_idx on job (finished_at) where state in ('succeeded', 'failed')`);
    this.addSql(`create index job_type_state_idx on job (type, state)`);
    this.addSql(`create unique index job_unique_key_idx on job (type, unique_key) where state in ('queued', 'running')`);
    this.addSql(`
      create table job_schedule (
        type varchar(100) primary key,
        spec varchar(200) not null,
        next_run_at timestamptz not null,
        last_run_at timestamptz null,
        updated_at timestamptz not null
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists job_schedule`);
    this.addSql(`drop table if exists job`);
  }
}
