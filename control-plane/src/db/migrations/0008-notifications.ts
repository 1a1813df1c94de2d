import { Migration } from '@mikro-orm/migrations';

// In-app notifications (document 1 §2, §4.5; notifications/notification.entity.ts).
export class Migration0008Notifications extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table notification (
        id uuid primary key,
        user_id uuid not null,
        type varchar(64) not null,
        category text check (category in ('payment', 'new_content', 'account_security', 'marketing')) not null,
        priority text check (priority in ('low', 'normal', 'high')) not null default 'normal',
        title varchar(200) not null,
        body text not null,
        is_read boolean not null default false,
        read_at timestamptz null,
        expires_at timestamptz null,
        created_at timestamptz not null
      )`);
    this.addSql(`alter table notification add constraint notification_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index notification_user_created_idx on notification (user_id, created_at, id)`);
    this.addSql(`create index notification_user_unread_idx on notification (user_id) where is_read = false`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists notification`);
  }
}
