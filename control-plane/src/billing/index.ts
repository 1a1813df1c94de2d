// The billing capability: plans and subscriptions (document 1 §2–4.3, 4.7–4.8),
// payment methods (§4.4), coupons, gift cards and the account balance (§4.5).
// Its start hook provides the payment gateway (chosen by PAYMENT_GATEWAY) to
// every part of billing, so the payment-method routes and the billing engine
// charge through the same object. Money is integer minor units (money.ts).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Registry } from 'prom-client';
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import { Plan, Subscription } from './billing.entities.ts';
import { Coupon, CouponRedemption } from './coupon.entity.ts';
import { AccountBalance, BalanceEntry, GiftCard } from './gift-card.entity.ts';
import { createPaymentGateway } from './gateway/index.ts';
import { PaymentMethod } from './payment-method.entity.ts';
import { Invoice, InvoiceCharge, InvoiceCounter, TaxRate } from './invoice.entity.ts';
import { paymentMethodRoutes } from './payment-method-routes.ts';
import { billingPersonalData, endSubscriptionsForAccountDeletion } from './personal-data.ts';
import { planRoutes } from './plan-routes.ts';
import { couponRoutes } from './coupon-routes.ts';
import { giftCardRoutes } from './gift-card-routes.ts';
import { subscriptionRoutes } from './subscription-routes.ts';
import { adminSubscriptionRoutes } from './admin-subscription-routes.ts';
import { billingClockJob } from './billing-clock.ts';
import { highestProfileLimit } from './profile-limit.ts';
import type { BillingServices } from './services.ts';
import { BillingMetrics } from './billing-metrics.ts';

export type { BillingServices } from './services.ts';
export { findDefaultPaymentMethod, findUserPaymentMethod } from './subscription-payment-method.ts';
// For the billing engine (subscriptions, invoices, renewals), inside its own transactions.
export { findActivePlan, findPlan } from './plan-service.ts';
export { couponDiscount, couponRefusal, findCouponByCode, redeemCoupon } from './coupon-service.ts';
export { balanceOf, creditBalance, debitBalance } from './balance-service.ts';

export const billing = {
  name: 'billing',
  entities: [Plan, Subscription, PaymentMethod, Coupon, CouponRedemption, GiftCard, AccountBalance, BalanceEntry, Invoice, InvoiceCharge, InvoiceCounter, TaxRate],
  routes: [...planRoutes, ...couponRoutes, ...giftCardRoutes, ...paymentMethodRoutes, ...subscriptionRoutes, ...adminSubscriptionRoutes],
  jobs: [billingClockJob],
  personalData: billingPersonalData,
  async start(core: CoreServices) {
    // `core` is the application's services object, which receives what this hook returns (the gateway) once it has run.
    const app = core as BillingServices;
    const billingMetrics = new BillingMetrics(() => core.db.orm.em.fork() as EntityManager, core.log.child({ component: 'billing' }));
    return {
      metrics: (registry: Registry) => billingMetrics.register(registry),
      services: {
        billingMetrics,
        // Accounts' profile limit comes from the plans the user subscribes to.
        profileLimit: highestProfileLimit,
        // An account's deletion ends its live subscriptions at once, without refund.
        endSubscriptionsForDeletion: (rc: RequestContext, userId: string) => endSubscriptionsForAccountDeletion(app, rc, userId),
        paymentGateway: createPaymentGateway(core.config, () => core.clock.now().getTime()),
      },
    };
  },
};
