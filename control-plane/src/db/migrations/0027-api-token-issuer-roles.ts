import { Migration } from '@mikro-orm/migrations';

// An API token acts for its issuer: its rights are its role's permissions
// that the issuer still holds (cdn-admin/api-token-service.ts), so a change of
// an issuer's roles must drop the tokens every replica has resolved, as a
// revocation does. Channel `api_token_auth` (migration 0025) is notified when
// a role of a user who issued a token is granted, changed (its expiry) or
// removed; roles of everyone else (registration grants `subscriber`) do not
// disturb the cache. A truncate notifies unconditionally.
export class Migration0027ApiTokenIssuerRoles extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create function user_role_api_token_auth_changed() returns trigger language plpgsql as $$
      declare
        holder uuid := case when tg_op = 'DELETE' then old.user_id else new.user_id end;
      begin
        if exists (select 1 from cdn_api_token where created_by = holder) then
          perform pg_notify('api_token_auth', '');
        end if;
        return null;
      end $$`);
    this.addSql(`create trigger user_role_api_token_auth after insert or update or delete on user_role for each row
      execute function user_role_api_token_auth_changed()`);
    this.addSql(`create trigger user_role_api_token_auth_truncate after truncate on user_role for each statement
      execute function api_token_auth_changed()`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop trigger if exists user_role_api_token_auth_truncate on user_role`);
    this.addSql(`drop trigger if exists user_role_api_token_auth on user_role`);
    this.addSql(`drop function if exists user_role_api_token_auth_changed()`);
  }
}
