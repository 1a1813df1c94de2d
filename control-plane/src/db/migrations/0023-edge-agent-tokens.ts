import { Migration } from '@mikro-orm/migrations';

// Edge agent tokens (edge/agent-token-*.ts; DESIGN.md §7): the credential an
// edge agent presents on its control stream, issued by a superadmin, stored
// only as a keyed hash (HMAC-SHA256 under the token pepper), revocable.
export class Migration0023EdgeAgentTokens extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_agent_token (
        id uuid primary key,
        name varchar(100) not null,
        description varchar(500) null,
        token_hash varchar(64) not null,
        token_hint varchar(16) not null,
        status text check (status in ('active', 'revoked')) not null default 'active',
        expires_at timestamptz null,
        expiry_announced_at timestamptz null,
        last_used_at timestamptz null,
        revoked_at timestamptz null,
        created_by uuid null,
        replaced_by uuid null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint cdn_agent_token_hash_key unique (token_hash)
      )`);
    this.addSql(`create index cdn_agent_token_created_at_idx on cdn_agent_token (created_at, id)`);
    this.addSql(`create index cdn_agent_token_status_idx on cdn_agent_token (status)`);
    // The expiry sweep looks for active tokens past expires_at whose streams have not been told yet.
    this.addSql(`create index cdn_agent_token_expiry_idx on cdn_agent_token (expires_at) where status = 'active' and expiry_announced_at is null`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists cdn_agent_token`);
  }
}
