import { Migration } from '@mikro-orm/migrations';

// Coupons and their redemptions, gift cards, and the account balance with its
// ledger (document 1 §2; billing/coupon.entity.ts, billing/gift-card.entity.ts).
// Money in integer minor units; gift-card codes only as keyed hashes.
export class Migration0010BillingCatalog extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table billing_coupon (
        id uuid primary key,
        code varchar(50) not null,
        description varchar(500) null,
        discount_type text check (discount_type in ('percent', 'amount')) not null,
        percent_off_bp int null,
        amount_off_minor bigint null,
        currency varchar(3) null,
        applicable_plan_ids uuid[] not null default '{}',
        max_redemptions int null,
        max_redemptions_per_user int null,
        redemption_count int not null default 0,
        valid_from timestamptz not null,
        valid_until timestamptz null,
        status text check (status in ('active', 'inactive')) not null,
        deactivated_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint billing_coupon_code_key unique (code),
        constraint billing_coupon_discount_check check ((discount_type = 'percent' and percent_off_bp >= 1 and percent_off_bp <= 10000 and amount_off_minor is null) or (discount_type = 'amount' and amount_off_minor > 0 and currency is not null and percent_off_bp is null)),
        constraint billing_coupon_redemptions_check check (redemption_count >= 0 and (max_redemptions is null or redemption_count <= max_redemptions))
      )`);
    this.addSql(`create index billing_coupon_created_at_idx on billing_coupon (created_at, id)`);

    this.addSql(`
      create table billing_coupon_redemption (
        id uuid primary key,
        coupon_id uuid not null,
        user_id uuid not null,
        plan_id uuid null,
        subscription_id uuid null,
        invoice_id uuid null,
        created_at timestamptz not null
      )`);
    this.addSql(`alter table billing_coupon_redemption add constraint billing_coupon_redemption_coupon_id_foreign foreign key (coupon_id) references billing_coupon (id) on delete restrict`);
    this.addSql(`alter table billing_coupon_redemption add constraint billing_coupon_redemption_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table billing_coupon_redemption add constraint billing_coupon_redemption_plan_id_foreign foreign key (plan_id) references billing_plan (id) on delete set null`);
    this.addSql(`alter table billing_coupon_redemption add constraint billing_coupon_redemption_subscription_id_foreign foreign key (subscription_id) references billing_subscription (id) on delete set null`);
    this.addSql(`create index billing_coupon_redemption_coupon_user_idx on billing_coupon_redemption (coupon_id, user_id)`);

    this.addSql(`
      create table billing_gift_card (
        id uuid primary key,
        code_hash varchar(64) not null,
        code_last4 varchar(4) not null,
        initial_value_minor bigint not null,
        remaining_value_minor bigint not null,
        currency varchar(3) not null,
        status text check (status in ('active', 'redeemed', 'disabled')) not null,
        note varchar(500) null,
        redeemed_by_id uuid null,
        redeemed_at timestamptz null,
        expires_at timestamptz null,
        disabled_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint billing_gift_card_code_hash_key unique (code_hash),
        constraint billing_gift_card_value_check check (initial_value_minor > 0 and remaining_value_minor >= 0 and remaining_value_minor <= initial_value_minor)
      )`);
    this.addSql(`alter table billing_gift_card add constraint billing_gift_card_redeemed_by_id_foreign foreign key (redeemed_by_id) references app_user (id) on delete set null`);
    this.addSql(`create index billing_gift_card_created_at_idx on billing_gift_card (created_at, id)`);

    this.addSql(`
      create table billing_account_balance (
        id uuid primary key,
        user_id uuid not null,
        currency varchar(3) not null,
        balance_minor bigint not null,
        updated_at timestamptz not null,
        constraint billing_account_balance_user_currency_key unique (user_id, currency),
        constraint billing_account_balance_non_negative check (balance_minor >= 0)
      )`);
    this.addSql(`alter table billing_account_balance add constraint billing_account_balance_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);

    this.addSql(`
      create table billing_balance_entry (
        id uuid primary key,
        user_id uuid not null,
        currency varchar(3) not null,
        kind text check (kind in ('credit', 'debit')) not null,
        amount_minor bigint not null,
        balance_after_minor bigint not null,
        source text check (source in ('gift_card', 'invoice', 'refund', 'adjustment')) not null,
        reference_id uuid null,
        created_at timestamptz not null,
        constraint billing_balance_entry_amount_check check (amount_minor > 0 and balance_after_minor >= 0)
      )`);
    this.addSql(`alter table billing_balance_entry add constraint billing_balance_entry_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index billing_balance_entry_user_idx on billing_balance_entry (user_id, currency, created_at)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists billing_balance_entry`);
    this.addSql(`drop table if exists billing_account_balance`);
    this.addSql(`drop table if exists billing_gift_card`);
    this.addSql(`drop table if exists billing_coupon_redemption`);
    this.addSql(`drop table if exists billing_coupon`);
  }
}
