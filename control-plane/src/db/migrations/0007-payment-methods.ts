import { Migration } from '@mikro-orm/migrations';

// Saved payment methods (document 1 §2 "PaymentMethod"; billing/payment-method.entity.ts):
// the gateway's id and the details it reports for display. No column for card numbers.
export class Migration0007PaymentMethods extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table billing_payment_method (
        id uuid primary key,
        user_id uuid not null,
        gateway varchar(32) not null,
        gateway_payment_method_id varchar(255) not null,
        type text check (type in ('card', 'paypal')) not null,
        brand varchar(32) null,
        last4 varchar(4) null,
        exp_month smallint null,
        exp_year smallint null,
        billing_name varchar(100) null,
        billing_country varchar(2) null,
        wallet_email varchar(254) null,
        is_default boolean not null default false,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint billing_payment_method_gateway_id_key unique (gateway, gateway_payment_method_id),
        constraint billing_payment_method_last4_check check (last4 ~ '^[0-9]{4}$'),
        constraint billing_payment_method_exp_month_check check (exp_month >= 1 and exp_month <= 12)
      )`);
    this.addSql(`alter table billing_payment_method add constraint billing_payment_method_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`create index billing_payment_method_user_idx on billing_payment_method (user_id, created_at)`);
    this.addSql(`create unique index billing_payment_method_one_default on billing_payment_method (user_id) where is_default`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table if exists billing_payment_method`);
  }
}
