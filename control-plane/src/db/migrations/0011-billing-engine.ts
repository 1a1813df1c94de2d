import { Migration } from '@mikro-orm/migrations';

// The billing engine (billing/invoice.entity.ts): invoices with their line
// items, the charge attempts made for them, the per-year counter of invoice
// numbers, the per-country tax rates (seeded empty: no tax until an operator
// adds a rate), and the indexes the billing clock looks for due work with.
export class Migration0011BillingEngine extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table billing_invoice (
        id uuid primary key,
        user_id uuid not null,
        subscription_id uuid not null,
        plan_id uuid not null,
        invoice_number varchar(32) null,
        status text check (status in ('draft', 'open', 'paid', 'uncollectible', 'void')) not null,
        billing_reason text check (billing_reason in ('subscription_create', 'subscription_cycle', 'subscription_update')) not null,
        currency varchar(3) not null,
        amount_minor bigint not null,
        discount_minor bigint not null,
        tax_minor bigint not null,
        tax_rate_bp int null,
        tax_country varchar(2) null,
        balance_applied_minor bigint not null,
        amount_due_minor bigint not null,
        amount_paid_minor bigint not null,
        description varchar(500) not null,
        line_items jsonb not null,
        coupon_id uuid null,
        payment_method_id uuid null,
        period_start timestamptz not null,
        period_end timestamptz not null,
        due_date timestamptz not null,
        paid_at timestamptz null,
        attempt_count int not null default 0,
        next_attempt_at timestamptz null,
        created_at timestamptz not null,
        updated_at timestamptz not null,
        version int not null default 1,
        constraint billing_invoice_number_key unique (invoice_number),
        constraint billing_invoice_amounts_check check (discount_minor >= 0 and tax_minor >= 0 and balance_applied_minor >= 0 and amount_due_minor >= 0 and amount_paid_minor >= 0 and amount_paid_minor <= amount_due_minor),
        constraint billing_invoice_number_check check ((status = 'draft') = (invoice_number is null))
      )`);
    this.addSql(`alter table billing_invoice add constraint billing_invoice_user_id_foreign foreign key (user_id) references app_user (id) on delete cascade`);
    this.addSql(`alter table billing_invoice add constraint billing_invoice_subscription_id_foreign foreign key (subscription_id) references billing_subscription (id) on delete restrict`);
    this.addSql(`alter table billing_invoice add constraint billing_invoice_plan_id_foreign foreign key (plan_id) references billing_plan (id) on delete restrict`);
    this.addSql(`create index billing_invoice_user_idx on billing_invoice (user_id, created_at)`);
    this.addSql(`create index billing_invoice_subscription_idx on billing_invoice (subscription_id, created_at)`);
    this.addSql(`create index billing_invoice_due_attempt_idx on billing_invoice (next_attempt_at) where status = 'open' and next_attempt_at is not null`);
    this.addSql(`create unique index billing_invoice_one_per_period on billing_invoice (subscription_id, period_start) where billing_reason <> 'subscription_update' and status <> 'void'`);

    this.addSql(`
      create table billing_invoice_charge (
        id uuid primary key,
        invoice_id uuid not null,
        attempt int not null,
        idempotency_key varchar(100) not null,
        status text check (status in ('pending', 'succeeded', 'declined')) not null,
        amount_minor bigint not null,
        currency varchar(3) not null,
        payment_method_id uuid not null,
        gateway_charge_id varchar(255) null,
        decline_reason varchar(64) null,
        created_at timestamptz not null,
        settled_at timestamptz null,
        constraint billing_invoice_charge_key unique (idempotency_key),
        constraint billing_invoice_charge_attempt_key unique (invoice_id, attempt)
      )`);
    this.addSql(`alter table billing_invoice_charge add constraint billing_invoice_charge_invoice_id_foreign foreign key (invoice_id) references billing_invoice (id) on delete cascade`);

    this.addSql(`create table billing_invoice_counter (year int primary key, last_number int not null)`);
    this.addSql(`
      create table billing_tax_rate (
        country varchar(2) primary key,
        rate_bp int not null,
        updated_at timestamptz not null,
        constraint billing_tax_rate_check check (rate_bp >= 0 and rate_bp <= 10000)
      )`);

    this.addSql(`create index billing_subscription_due_idx on billing_subscription (next_billing_date) where status in ('trialing', 'active') and next_billing_date is not null`);
    this.addSql(`create index billing_subscription_period_end_idx on billing_subscription (status, current_period_end)`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop index if exists billing_subscription_period_end_idx`);
    this.addSql(`drop index if exists billing_subscription_due_idx`);
    this.addSql(`drop table if exists billing_tax_rate`);
    this.addSql(`drop table if exists billing_invoice_counter`);
    this.addSql(`drop table if exists billing_invoice_charge`);
    this.addSql(`drop table if exists billing_invoice`);
  }
}
