import { Migration } from '@mikro-orm/migrations';

// Issue 20, item 12 (billing/subscription-record.ts): a plan's max_* terms
// reach existing subscribers at their next renewal (document 1 §2), and
// max_quality is one of them, so the subscription keeps the one it was sold
// with, as it keeps max_profiles and the others. Existing subscriptions take
// their plan's current quality (what they were shown until now); null (a row
// written by hand) reads as the plan's.
export class Migration0036BillingSubscriptionMaxQuality extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table billing_subscription add column max_quality text check (max_quality in ('SD', 'HD', 'FHD', 'UHD_4K', 'UHD_8K')) null`);
    this.addSql(`update billing_subscription s set max_quality = p.max_quality from billing_plan p where p.id = s.plan_id`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table billing_subscription drop column max_quality`);
  }
}
