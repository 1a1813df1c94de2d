import { Migration } from '@mikro-orm/migrations';

// Plans and subscriptions (document 1 §2; billing/billing.entities.ts). Money in
// integer minor units; a subscription carries the terms it was sold with.
export class Migration0005BillingModel extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table billing_plan (
        id uuid primary key,
        name varchar(100) not null,
        type text check (type in ('svod', 'live', 'addon', 'ppv')) not null,
        description varchar(500) null,
        price_minor bigint not null,
        currency varchar(3) not null,
        billing_cycle text check (billing_cycle in ('monthly', 'quarterly', 'semi_annual', 'annual')) not null,
        max_profiles smallint not null,
        max_concurrent_streams smallint not null,
        max_devices smallint not null,
        max_quality text check (max_quality in ('SD', 'HD', 'FHD', 'UHD_4K', 'UHD_8K')) not null,
        has_downloads boolean not null,
        allow_download_count int null,
        has_ads boolean not null,
        has_hdr boolean not null default false,
        has_dolby_atmos boolean not null default false,
        trial_days int not null default 0,
        is_active boolean not null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`create index billing_plan_created_at_idx on billing_plan (created_at, id)`);
    this.addSql(`
      create table billing_subscription (
        id uuid primary key,
        user_id uuid not null,
        plan_id uuid not null,
        type text check (type in ('svod', 'live', 'addon', 'ppv')) not null,
        status text check (status in ('trialing', 'active', 'past_due', 'canceled', 'paused', 'expired')) not null,
        price_minor bigint not null,
        currency varchar(3) not null,
        billing_cycle text check (billing_cycle in ('monthly', 'quarterly', 'semi_annual', 'annual')) not null,
        max_profiles smallint not null,
        max_concurrent_streams smallint not null,
        max_devices smallint not null,
        auto_renew boolean not null default true,
        current_period_start timestamptz not null,
        current_period_end timestamptz not null,
        next_billing_date timestamptz null,
        cancel_at_period_end boolean not null default false,
        canceled_at timestamptz null,
        paused_at timestamptz null,
        resume_at timestamptz null,
        trial_start timestamptz null,
        trial_end timestamptz null,
        payment_method_id uuid null,
        coupon_id uuid null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1
      )`);
    this.addSql(`alter table billing_subscription add constraint billing_subscription_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table billing_subscription add constraint billing_subscription_plan_id_foreign foreign key (plan_id) references billing_plan (id) on delete restrict`);
    this.addSql(`create index billing_subscription_user_idx on billing_subscription (user_id, created_at)`);
    this.addSql(`create index billing_subscription_created_at_idx on billing_subscription (created_at, id)`);
    this.addSql(`create unique index billing_subscription_one_live_per_type on billing_subscription (user_id, type) where status in ('trialing', 'active', 'past_due', 'paused')`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists billing_subscription`);
    this.addSql(`drop table if exists billing_plan`);
  }
}
