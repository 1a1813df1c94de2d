import { Migration } from '@mikro-orm/migrations';

// Whether an account's password is one the owner of its mailbox chose or
// confirmed (verification with it or with a new one, a reset, an invitation,
// admin:create), rather than only one set by whoever registered the address.
// Verification with the token alone keeps the registration's password, so a
// confirmed address no longer says who chose it; the role grants read this.
// Until now every verified account's password was one its owner chose or
// confirmed (verification removed any other), so those start confirmed.
export class Migration0048PasswordConfirmed extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table app_user add column password_confirmed boolean not null default false`);
    this.addSql(`update app_user set password_confirmed = true
      where email_verified and password_hash is not null and status <> 'pending_verification'`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table app_user drop column password_confirmed`);
  }
}
