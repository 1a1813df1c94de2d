// The services billing adds to the platform's (from its start hook), and the
// route declaration of its routes. The gateway is one object per process, so
// the payment-method routes and the billing engine (subscriptions, invoices,
// renewals) charge through the same one.
import type { CoreServices } from '../core/services.ts';
import { routesFor } from '../http/route.ts';
import type { BillingMetrics } from './billing-metrics.ts';
import type { PaymentGateway } from './gateway/payment-gateway.ts';

export interface BillingServices extends CoreServices {
  paymentGateway: PaymentGateway;
  /** Counts what the billing clock does (absent where billing runs without a control plane: tests, benchmarks). */
  billingMetrics?: BillingMetrics;
}

export const defineBillingRoute = routesFor<BillingServices>();
