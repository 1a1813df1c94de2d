// The PaymentMethod record of document 1 §2, which is also its presenter: the
// router parses the entity (plus the computed is_expired) through it, so the
// gateway's id and the owner never leave.
import { z } from 'zod';
import { versioned } from '../http/route.ts';
import { orNull, timestamp } from '../http/schemas.ts';
import { cardExpired, PAYMENT_METHOD_TYPES } from './gateway/payment-gateway.ts';
import type { PaymentMethod } from './payment-method.entity.ts';

export const paymentMethodRecord = z.object({
  id: z.uuid(),
  type: z.enum(PAYMENT_METHOD_TYPES),
  brand: orNull(z.string()),
  last4: orNull(z.string()),
  exp_month: orNull(z.number().int()),
  exp_year: orNull(z.number().int()),
  is_expired: z.boolean(),
  is_default: z.boolean(),
  billing_name: orNull(z.string()),
  billing_country: orNull(z.string()),
  wallet_email: orNull(z.string()),
  created_at: timestamp(),
  updated_at: timestamp(),
});

/** A payment method's single-record replies carry its version as ETag. */
export const paymentMethodResource = versioned(paymentMethodRecord);

/** The value a route hands over: the method and whether it has expired by the request's clock. */
export function presentPaymentMethod(method: PaymentMethod, nowMs: number): PaymentMethod & { is_expired: boolean } {
  // A copy, not a prototype link: objects of one shape keep the record's parse fast.
  return { ...method, is_expired: cardExpired(method.exp_month, method.exp_year, nowMs) };
}
