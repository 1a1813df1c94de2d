import { Migration } from '@mikro-orm/migrations';

export class Migration0002Auth extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table app_user (
        id uuid primary key,
        email varchar(254) not null,
        email_verified boolean not null default false,
        password_hash varchar(255) null,
        display_name varchar(100) null,
        phone varchar(20) null,
        phone_verified boolean not null default false,
        locale varchar(35) null,
        timezone varchar(64) null,
        country_code varchar(2) null,
        preferred_language varchar(35) null,
        status text check (status in ('active', 'suspended', 'pending_verification', 'deleted')) not null default 'pending_verification',
        mfa_enabled boolean not null default false,
        totp_secret_encrypted text null,
        totp_pending_secret_encrypted text null,
        totp_last_step bigint null,
        recovery_codes_generated_at timestamptz null,
        notification_preferences jsonb not null,
        avatar_url varchar(2048) null,
        terms_accepted_at timestamptz null,
        last_login_at timestamptz null,
        suspended_reason varchar(500) null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint app_user_email_key unique (email)
      )`);
    this.addSql(`create index app_user_created_at_idx on app_user (created_at, id)`);
    this.addSql(`create index app_user_status_idx on app_user (status)`);

    this.addSql(`
      create table role (
        name varchar(50) primary key,
        description varchar(500) null,
        created_at timestamptz not null
      )`);
    this.addSql(`
      create table role_permission (
        id uuid primary key,
        role_name varchar(50) not null,
        permission varchar(100) not null,
        resource_type varchar(50) null,
        resource_id varchar(100) null
      )`);
    this.addSql(`create index role_permission_role_idx on role_permission (role_name)`);
    this.addSql(`
      create table user_role (
        id uuid primary key,
        user_id uuid not null,
        role_name varchar(50) not null,
        expires_at timestamptz null,
        granted_by uuid null,
        created_at timestamptz not null,
        constraint user_role_user_role_key unique (user_id, role_name)
      )`);

    this.addSql(`
      create table auth_session (
        id uuid primary key,
        user_id uuid not null,
        device_type varchar(30) not null,
        platform varchar(50) null,
        ip_address_hint varchar(64) null,
        user_agent varchar(512) null,
        created_at timestamptz not null,
        last_active_at timestamptz not null,
        expires_at timestamptz not null,
        revoked_at timestamptz null,
        revoked_reason varchar(50) null
      )`);
    this.addSql(`create index auth_session_user_idx on auth_session (user_id)`);
    this.addSql(`
      create table auth_refresh_token (
        id uuid primary key,
        session_id uuid not null,
        token_hash varchar(128) not null,
        created_at timestamptz not null,
        expires_at timestamptz not null,
        used_at timestamptz null,
        constraint auth_refresh_token_hash_key unique (token_hash)
      )`);
    this.addSql(`create index auth_refresh_token_session_idx on auth_refresh_token (session_id)`);
    this.addSql(`
      create table auth_one_time_token (
        id uuid primary key,
        user_id uuid not null,
        purpose text check (purpose in ('email_verification', 'password_reset', 'invitation')) not null,
        token_hash varchar(128) not null,
        created_at timestamptz not null,
        expires_at timestamptz not null,
        used_at timestamptz null,
        constraint auth_one_time_token_hash_key unique (token_hash)
      )`);
    this.addSql(`create index auth_one_time_token_user_idx on auth_one_time_token (user_id, purpose)`);
    this.addSql(`
      create table auth_recovery_code (
        id uuid primary key,
        user_id uuid not null,
        code_hash varchar(128) not null,
        hint varchar(4) not null,
        created_at timestamptz not null,
        used_at timestamptz null
      )`);
    this.addSql(`create index auth_recovery_code_user_idx on auth_recovery_code (user_id)`);
    this.addSql(`
      create table auth_jwt_signing_key (
        kid varchar(64) primary key,
        status text check (status in ('active', 'retiring', 'retired')) not null,
        sealed_key text not null,
        created_at timestamptz not null,
        updated_at timestamptz not null
      )`);
    this.addSql(`alter table role_permission add constraint role_permission_role_name_foreign foreign key (role_name) references role (name) on delete cascade`);
    this.addSql(`alter table user_role add constraint user_role_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table user_role add constraint user_role_role_name_foreign foreign key (role_name) references role (name) on delete cascade`);
    this.addSql(`alter table auth_session add constraint auth_session_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table auth_refresh_token add constraint auth_refresh_token_session_id_foreign foreign key (session_id) references auth_session (id) on delete cascade`);
    this.addSql(`alter table auth_one_time_token add constraint auth_one_time_token_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table auth_recovery_code add constraint auth_recovery_code_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
  }

  override async down(): Promise<void> {
    for (const table of ['auth_jwt_signing_key', 'auth_recovery_code', 'auth_one_time_token', 'auth_refresh_token', 'auth_session', 'user_role', 'role_permission', 'role', 'app_user']) {
      this.addSql(`drop table if exists ${table}`);
    }
  }
}
