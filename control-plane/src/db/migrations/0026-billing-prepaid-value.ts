import { Migration } from '@mikro-orm/migrations';

// Issue 20, items 1 and 2 (billing/invoice-service.ts, "The billing engine"
// in docs/decisions.md):
// - a subscription remembers what was actually paid for the rest of its
//   current period (`prepaid_minor` net of discounts, `prepaid_tax_minor` the
//   tax paid on it, spread evenly from `prepaid_from` to the period end), so a
//   plan change credits what was paid for the unused time, never the list
//   price;
// - an invoice's totals add up from its lines: `amount` is the signed sum of
//   the lines (a downgrade's is negative), `tax_minor` may be negative (the
//   tax paid on credited time comes back), and what a negative total gives
//   back goes to the account balance, recorded as `balance_credit_minor`;
//   amount − discount + tax − balance applied + balance credit = amount due.
export class Migration0026BillingPrepaidValue extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table billing_subscription
      add column prepaid_minor bigint not null default '0',
      add column prepaid_tax_minor bigint not null default '0',
      add column prepaid_from timestamptz null`);
    this.addSql(`alter table billing_subscription add constraint billing_subscription_prepaid_check check (prepaid_minor >= 0 and prepaid_tax_minor >= 0)`);
    // What the latest paid invoice of the current period paid for it (its charges less the discount, and their tax):
    // the best record there is of subscriptions sold before this column existed.
    this.addSql(`update billing_subscription s
      set prepaid_minor = greatest(0, x.charges - x.discount_minor), prepaid_tax_minor = greatest(0, x.tax_minor), prepaid_from = x.period_start
      from (
        select distinct on (i.subscription_id) i.subscription_id, i.period_start, i.discount_minor, i.tax_minor,
               (select coalesce(sum((l->>'amount_minor')::bigint), 0) from jsonb_array_elements(i.line_items) l where (l->>'amount_minor')::bigint > 0) as charges
        from billing_invoice i join billing_subscription s2 on s2.id = i.subscription_id
        where i.status = 'paid' and i.period_end = s2.current_period_end
        order by i.subscription_id, i.created_at desc
      ) x
      where s.id = x.subscription_id and s.status in ('active', 'past_due', 'paused')`);

    this.addSql(`alter table billing_invoice add column balance_credit_minor bigint not null default '0'`);
    // Downgrades invoiced before: amount was clamped to 0 while the lines summed below it, and that credit went to the balance.
    this.addSql(`update billing_invoice i
      set amount_minor = x.total, balance_credit_minor = -x.total
      from (select id, (select coalesce(sum((l->>'amount_minor')::bigint), 0) from jsonb_array_elements(line_items) l) as total from billing_invoice) x
      where i.id = x.id and x.total < 0 and i.amount_minor = 0`);
    this.addSql(`alter table billing_invoice drop constraint billing_invoice_amounts_check`);
    this.addSql(`alter table billing_invoice add constraint billing_invoice_amounts_check check (discount_minor >= 0 and balance_applied_minor >= 0
      and balance_credit_minor >= 0 and amount_due_minor >= 0 and amount_paid_minor >= 0 and amount_paid_minor <= amount_due_minor
      and amount_minor - discount_minor + tax_minor - balance_applied_minor + balance_credit_minor = amount_due_minor)`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table billing_invoice drop constraint billing_invoice_amounts_check`);
    this.addSql(`update billing_invoice set amount_minor = 0 where amount_minor < 0`);
    this.addSql(`alter table billing_invoice add constraint billing_invoice_amounts_check check (discount_minor >= 0 and tax_minor >= 0 and balance_applied_minor >= 0 and amount_due_minor >= 0 and amount_paid_minor >= 0 and amount_paid_minor <= amount_due_minor)`);
    this.addSql(`alter table billing_invoice drop column balance_credit_minor`);
    this.addSql(`alter table billing_subscription drop constraint billing_subscription_prepaid_check`);
    this.addSql(`alter table billing_subscription drop column prepaid_minor, drop column prepaid_tax_minor, drop column prepaid_from`);
  }
}
