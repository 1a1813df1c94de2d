// Chooses the payment gateway by configuration (PAYMENT_GATEWAY). Only the
// test gateway exists today; a real provider is one more case here and one
// class implementing PaymentGateway.
import type { Config } from '../../config/config.ts';
import type { PaymentGateway } from './payment-gateway.ts';
import { TestPaymentGateway } from './test-gateway.ts';

export * from './payment-gateway.ts';
export { TEST_TOKENS, TestPaymentGateway } from './test-gateway.ts';

export function createPaymentGateway(config: Pick<Config, 'PAYMENT_GATEWAY'>, now: () => number): PaymentGateway {
  switch (config.PAYMENT_GATEWAY) {
    case 'test':
      return new TestPaymentGateway(now);
  }
}
