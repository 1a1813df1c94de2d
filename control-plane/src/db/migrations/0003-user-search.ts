import { Migration } from '@mikro-orm/migrations';

// Full-text search of users for GET /v1/admin/users?q= (userSearchDocument in
// accounts/user.entity.ts is the same expression; a test checks the query uses this index).
export class Migration0003UserSearch extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create index app_user_search_idx on app_user using gin (
        to_tsvector('simple'::regconfig, coalesce(display_name, '') || ' ' || email || ' '
          || regexp_replace(email, '[^[:alnum:]]+', ' ', 'g') || ' ' || split_part(email, '@', 2))
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists app_user_search_idx`);
  }
}
