// What billing holds about a user (core/personal-data.ts), and how an
// account's deletion ends its subscriptions. The export lists subscriptions
// and payment methods as the API shows them: a card is its brand, last four
// digits and expiry, never the gateway's reference. The erasure deletes the
// payment methods (and forgets them at the gateway) and keeps the
// subscriptions, the balance ledger and coupon redemptions, which hold no
// personal data (amounts and references to the tombstoned account), as
// accounting records.
import type { PersonalDataProvider } from '../core/personal-data.ts';
import type { RequestContext } from '../core/request-context.ts';
import { LIVE_SUBSCRIPTION_STATUSES, Subscription } from './billing.entities.ts';
import { paymentMethodRecord, presentPaymentMethod } from './payment-method-record.ts';
import { CouponRedemption } from './coupon.entity.ts';
import { AccountBalance, BalanceEntry } from './gift-card.entity.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import { Invoice } from './invoice.entity.ts';
import { invoiceRecord, presentInvoice } from './subscription-record.ts';
import type { BillingServices } from './services.ts';
import { cancelNow } from './subscription-transitions.ts';

/**
 * Ends the user's live subscriptions at once, without refund, because the
 * account is to be deleted (document 1 §3): each through the `cancel`
 * transition with the user as the acting party (it is their request), with
 * no renewal left and its open invoices voided, so nothing more is billed.
 * In the caller's unit of work.
 */
export async function endSubscriptionsForAccountDeletion(app: BillingServices, rc: RequestContext, userId: string): Promise<number> {
  const live = await rc.em.find(Subscription, { user: userId, status: { $in: [...LIVE_SUBSCRIPTION_STATUSES] } }, { populate: ['plan'] });
  for (const subscription of live) await cancelNow(app, rc, subscription, { reason: 'account deletion requested', endRenewal: true });
  return live.length;
}

export const billingPersonalData: PersonalDataProvider<BillingServices> = {
  name: 'billing',

  async export(rc, userId, app) {
    const subscriptions = await rc.em.find(Subscription, { user: userId }, { orderBy: { created_at: 'asc' }, populate: ['plan'] });
    const methods = await rc.em.find(PaymentMethod, { user: userId }, { orderBy: { created_at: 'asc' } });
    const balances = await rc.em.find(AccountBalance, { user: userId }, { orderBy: { currency: 'asc' } });
    const entries = await rc.em.find(BalanceEntry, { user: userId }, { orderBy: { created_at: 'asc' } });
    const invoices = await rc.em.find(Invoice, { user: userId, status: { $ne: 'draft' } }, { orderBy: { created_at: 'asc' } });
    const redemptions = await rc.em.find(CouponRedemption, { user: userId }, { orderBy: { created_at: 'asc' }, populate: ['coupon'] });
    const now = app.clock.now().getTime();
    return {
      subscriptions: subscriptions.map((s) => ({
        id: s.id, plan_id: s.plan.id, plan_name: s.plan.name, type: s.type, status: s.status,
        price_minor: s.price_minor, currency: s.currency, billing_cycle: s.billing_cycle,
        max_profiles: s.max_profiles, max_concurrent_streams: s.max_concurrent_streams, max_devices: s.max_devices, max_quality: s.max_quality ?? s.plan.max_quality,
        auto_renew: s.auto_renew, current_period_start: s.current_period_start, current_period_end: s.current_period_end,
        next_billing_date: s.next_billing_date ?? null, cancel_at_period_end: s.cancel_at_period_end, canceled_at: s.canceled_at ?? null, ended_at: s.ended_at ?? null,
        paused_at: s.paused_at ?? null, resume_at: s.resume_at ?? null, trial_start: s.trial_start ?? null, trial_end: s.trial_end ?? null,
        payment_method_id: s.payment_method_id ?? null, created_at: s.created_at,
      })),
      payment_methods: methods.map((m) => paymentMethodRecord.parse(presentPaymentMethod(m, now))),
      account_balances: balances.map((b) => ({ currency: b.currency, balance_minor: b.balance_minor, updated_at: b.updated_at })),
      balance_entries: entries.map((e) => ({
        id: e.id, currency: e.currency, kind: e.kind, amount_minor: e.amount_minor, balance_after_minor: e.balance_after_minor,
        source: e.source, reference_id: e.reference_id ?? null, created_at: e.created_at,
      })),
      coupon_redemptions: redemptions.map((r) => ({
        id: r.id, coupon_code: r.coupon.code, plan_id: r.plan?.id ?? null, subscription_id: r.subscription?.id ?? null,
        invoice_id: r.invoice_id ?? null, created_at: r.created_at,
      })),
      invoices: invoices.map((i) => invoiceRecord.parse(presentInvoice(i))),
    };
  },

  async identifiers(rc, userId) {
    const methods = await rc.em.find(PaymentMethod, { user: userId });
    return methods.flatMap((m) => [m.billing_name, m.wallet_email]).filter((v): v is string => Boolean(v));
  },

  async erase(rc, subject, app) {
    const methods = await rc.em.find(PaymentMethod, { user: subject.userId });
    await rc.em.nativeDelete(PaymentMethod, { user: subject.userId });
    // The gateway forgets them too; a failure is logged (the methods are unusable without our record).
    for (const method of methods) {
      if (method.gateway !== app.paymentGateway.name) continue;
      try {
        await app.paymentGateway.detach(method.gateway_payment_method_id);
      } catch (error) {
        rc.log.warn({ err: error, gateway: method.gateway }, 'payment method of an erased account not detached at the gateway');
      }
    }
    // Subscriptions stay, as accounting records: they name a plan, prices and dates, no personal data.
    // Invoices stay too, for accounting: they hold numbers, amounts, dates, plan names and the tax
    // country, no name or address, so nothing in them needs erasing.
  },
};
