import { Migration } from '@mikro-orm/migrations';

// Issue 20, item 6 (billing/subscription-transitions.ts): `canceled_at` keeps
// Stripe's meaning, when the cancellation was asked for, and `ended_at` says
// when a subscription stopped (canceled or expired). Ended subscriptions
// before this: a period-end cancellation had canceled_at rewritten to its
// period end (that is when it ended); the others ended at canceled_at, or at
// their period end for an expiry.
export class Migration0033BillingSubscriptionEndedAt extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table billing_subscription add column ended_at timestamptz null`);
    this.addSql(`update billing_subscription set ended_at = case when status = 'expired' then current_period_end else coalesce(canceled_at, updated_at) end
      where status in ('canceled', 'expired')`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table billing_subscription drop column ended_at`);
  }
}
