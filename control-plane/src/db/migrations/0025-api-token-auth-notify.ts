import { Migration } from '@mikro-orm/migrations';

// A notification on channel `api_token_auth` whenever something an API
// token's resolution reads changes (cdn-admin/api-token-cache.ts): the token's
// status, role, expiry, hash or issuer, its issuer's account status, or the
// permissions of any role. Every replica listens and drops the tokens it has
// resolved; PostgreSQL sends the notification when the change commits, and
// only then. Identical notifications of one transaction arrive once.
export class Migration0025ApiTokenAuthNotify extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create function api_token_auth_changed() returns trigger language plpgsql as $$
      begin
        perform pg_notify('api_token_auth', '');
        return null;
      end $$`);
    this.addSql(`create trigger cdn_api_token_auth_update after update on cdn_api_token for each row
      when (old.status is distinct from new.status or old.role is distinct from new.role or old.expires_at is distinct from new.expires_at
        or old.token_hash is distinct from new.token_hash or old.created_by is distinct from new.created_by)
      execute function api_token_auth_changed()`);
    this.addSql(`create trigger cdn_api_token_auth_delete after delete on cdn_api_token for each statement execute function api_token_auth_changed()`);
    this.addSql(`create trigger app_user_auth_update after update on app_user for each row
      when (old.status is distinct from new.status) execute function api_token_auth_changed()`);
    this.addSql(`create trigger app_user_auth_delete after delete on app_user for each statement execute function api_token_auth_changed()`);
    this.addSql(`create trigger role_permission_auth_change after insert or update or delete or truncate on role_permission
      for each statement execute function api_token_auth_changed()`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop trigger if exists role_permission_auth_change on role_permission`);
    this.addSql(`drop trigger if exists app_user_auth_delete on app_user`);
    this.addSql(`drop trigger if exists app_user_auth_update on app_user`);
    this.addSql(`drop trigger if exists cdn_api_token_auth_delete on cdn_api_token`);
    this.addSql(`drop trigger if exists cdn_api_token_auth_update on cdn_api_token`);
    this.addSql(`drop function if exists api_token_auth_changed()`);
  }
}
