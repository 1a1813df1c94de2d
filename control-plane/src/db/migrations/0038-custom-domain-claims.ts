import { Migration } from '@mikro-orm/migrations';

// Custom domain claims (issue 21 item 7): a hostname is served only once a
// claim of it is validated (it holds a certificate: custom, checked at
// creation; managed, issued once its DNS records proved control), and an
// unvalidated claim no longer blocks other endpoints from claiming the name.
// So the hostname is unique among validated claims only, and an endpoint
// claims a hostname once.
export class Migration0038CustomDomainClaims extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table cdn_custom_domain drop constraint cdn_custom_domain_hostname_key`);
    this.addSql(`create unique index cdn_custom_domain_hostname_key on cdn_custom_domain (hostname) where certificate_pem is not null`);
    this.addSql(`alter table cdn_custom_domain add constraint cdn_custom_domain_endpoint_hostname_key unique (endpoint_id, hostname)`);
    this.addSql(`create index cdn_custom_domain_hostname_idx on cdn_custom_domain (hostname)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists cdn_custom_domain_hostname_idx`);
    this.addSql(`alter table cdn_custom_domain drop constraint if exists cdn_custom_domain_endpoint_hostname_key`);
    this.addSql(`drop index if exists cdn_custom_domain_hostname_key`);
    this.addSql(`alter table cdn_custom_domain add constraint cdn_custom_domain_hostname_key unique (hostname)`);
  }
}
