import { Migration } from '@mikro-orm/migrations';

// Issue 20, item 3 (billing/subscription-payment-method.ts): a subscription
// follows the account's default payment method unless one was chosen for it.
// Existing subscriptions billed to a method other than the default were given
// it on purpose (at sale, or by an administrator): they keep it, chosen.
export class Migration0028BillingChosenPaymentMethod extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table billing_subscription add column payment_method_chosen boolean not null default false`);
    this.addSql(`update billing_subscription s set payment_method_chosen = true
      where s.payment_method_id is not null and not exists (
        select 1 from billing_payment_method m where m.id = s.payment_method_id and m.user_id = s.user_id and m.is_default)`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table billing_subscription drop column payment_method_chosen`);
  }
}
