import { Migration } from '@mikro-orm/migrations';

// Viewing profiles (document 1 §2 "Profile", §4.2; accounts/profile.entity.ts)
// with their watchlist and playback progress, which go when the profile goes.
// Every existing account gets its primary profile, named as new accounts'
// are (primaryProfileName in accounts/profile-service.ts): the display name,
// else the e-mail address's local part, cut to 50 characters.
export class Migration0006Profiles extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table profile (
        id uuid primary key,
        user_id uuid not null,
        name varchar(50) not null,
        avatar_preset_id uuid null,
        is_primary boolean not null default false,
        pin_hash varchar(64) null,
        content_rating_limit text check (content_rating_limit in ('G', 'PG', 'PG-13', 'R', 'NC-17', 'TV-Y', 'TV-G', 'TV-PG', 'TV-14', 'TV-MA')) not null default 'TV-MA',
        language varchar(35) null,
        is_kids boolean not null default false,
        autoplay_next_episode boolean not null default true,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table profile add constraint profile_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index profile_user_idx on profile (user_id, created_at)`);
    this.addSql(`create unique index profile_one_primary_per_user on profile (user_id) where is_primary`);

    this.addSql(`
      create table profile_watchlist_item (
        id uuid primary key,
        profile_id uuid not null,
        content_id varchar(100) not null,
        created_at timestamptz not null,
        constraint profile_watchlist_item_profile_content_key unique (profile_id, content_id)
      )`);
    this.addSql(`alter table profile_watchlist_item add constraint profile_watchlist_item_profile_id_foreign foreign key (profile_id) references profile (id) on delete cascade`);
    this.addSql(`create index profile_watchlist_item_profile_idx on profile_watchlist_item (profile_id, created_at)`);

    this.addSql(`
      create table profile_progress (
        id uuid primary key,
        profile_id uuid not null,
        content_id varchar(100) not null,
        series_id varchar(100) null,
        position_seconds int not null,
        duration_seconds int null,
        completed boolean not null default false,
        updated_at timestamptz not null,
        constraint profile_progress_profile_content_key unique (profile_id, content_id)
      )`);
    this.addSql(`alter table profile_progress add constraint profile_progress_profile_id_foreign foreign key (profile_id) references profile (id) on delete cascade`);
    this.addSql(`create index profile_progress_profile_updated_idx on profile_progress (profile_id, updated_at)`);

    // Accounts created before profiles existed get their primary profile now.
    this.addSql(`
      insert into profile (id, user_id, name, is_primary, created_at, updated_at)
      select gen_random_uuid(), u.id,
             btrim(left(coalesce(nullif(btrim(u.display_name), ''), regexp_replace(u.email, '@[^@]*$', '')), 50)),
             true, now(), now()
        from app_user u
       where not exists (select 1 from profile p where p.user_id = u.id and p.is_primary)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists profile_progress`);
    this.addSql(`drop table if exists profile_watchlist_item`);
    this.addSql(`drop table if exists profile`);
  }
}
