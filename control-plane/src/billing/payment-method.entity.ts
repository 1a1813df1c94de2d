// A saved payment method (document 1 §2 "PaymentMethod"): the gateway's id of
// it and the details it reported for display, nothing more. Card numbers and
// security codes never reach the system (the client-side SDK sends them to the
// gateway and hands us a token), so no column could hold one. `is_expired` is
// not stored: it is computed from the expiry when read (payment-method-record.ts).
import { defineEntity, p } from '@mikro-orm/core';
import { User } from '../accounts/index.ts';
import { PAYMENT_METHOD_TYPES } from './gateway/payment-gateway.ts';

export const PaymentMethodSchema = defineEntity({
  name: 'PaymentMethod',
  tableName: 'billing_payment_method',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    /** Which gateway holds the method (PAYMENT_GATEWAY when it was attached). */
    gateway: p.string().length(32),
    /** The gateway's id of the method, charged by the billing engine. */
    gateway_payment_method_id: p.string().length(255),
    type: p.enum(PAYMENT_METHOD_TYPES),
    brand: p.string().length(32).nullable(),
    last4: p.string().length(4).nullable(),
    exp_month: p.smallint().nullable(),
    exp_year: p.smallint().nullable(),
    billing_name: p.string().length(100).nullable(),
    billing_country: p.string().length(2).nullable(),
    wallet_email: p.string().length(254).nullable(),
    is_default: p.boolean().default(false),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    version: p.integer().version(),
  },
  indexes: [
    { name: 'billing_payment_method_user_idx', properties: ['user', 'created_at'] },
    // One default per user, held by the database.
    {
      name: 'billing_payment_method_one_default',
      expression: `create unique index "billing_payment_method_one_default" on "billing_payment_method" ("user_id") where is_default`,
    },
  ],
  // What the gateway reports is checked again where it is kept: four digits, a real month.
  checks: [
    { name: 'billing_payment_method_last4_check', expression: `last4 ~ '^[0-9]{4}$'` },
    { name: 'billing_payment_method_exp_month_check', expression: 'exp_month >= 1 and exp_month <= 12' },
  ],
  uniques: [{ name: 'billing_payment_method_gateway_id_key', properties: ['gateway', 'gateway_payment_method_id'] }],
});
export class PaymentMethod extends PaymentMethodSchema.class {}
PaymentMethodSchema.setClass(PaymentMethod);
