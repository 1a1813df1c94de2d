import { Migration } from '@mikro-orm/migrations';

// ACME issuance of managed certificates (cdn/acme-issuer.ts): the ACME
// account per directory URL (its key sealed), and on each custom domain the
// ACME order its DNS-01 challenge belongs to while one is open.
export class Migration0019CdnAcme extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table cdn_acme_account (
        directory_url varchar(2048) primary key,
        account_key_sealed text not null,
        account_url varchar(2048) null,
        created_at timestamptz not null
      )`);
    this.addSql(`alter table cdn_custom_domain add column acme_order jsonb null`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table cdn_custom_domain drop column if exists acme_order`);
    this.addSql(`drop table if exists cdn_acme_account`);
  }
}
