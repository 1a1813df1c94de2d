// The billing capability: plans and subscriptions (document 1 §2–4.3, 4.7–4.8).
// Today its model, on which accounts' rules already stand (the profile limit,
// cancellation at account deletion), and the payment gateway its start hook
// provides (chosen by PAYMENT_GATEWAY) to every part of billing.
import type { CoreServices } from '../core/services.ts';
import { Plan, Subscription } from './billing.entities.ts';
import { createPaymentGateway } from './gateway/index.ts';

export type { BillingServices } from './services.ts';

export const billing = {
  name: 'billing',
  entities: [Plan, Subscription],
  async start(core: CoreServices) {
    return { services: { paymentGateway: createPaymentGateway(core.config, core.now) } };
  },
};
