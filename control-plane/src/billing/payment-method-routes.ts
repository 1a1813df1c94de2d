// Payment methods (document 1 §4.4; DESIGN.md §5 and §6): list, attach from
// a gateway token, read one, make default, read the default, delete.
import { z } from 'zod';
import { data, empty, list, reply, type RateLimitRule } from '../http/route.ts';
import { lineText, uuid, withExample } from '../http/schemas.ts';
import { TEST_TOKENS } from './gateway/test-gateway.ts';
import { paymentMethodRecord, paymentMethodResource, presentPaymentMethod } from './payment-method-record.ts';
import {
  attachPaymentMethod, deletePaymentMethod, findActionablePaymentMethod, listPaymentMethods, makeDefaultPaymentMethod,
  MAX_PAYMENT_METHODS_PER_USER, readDefaultPaymentMethod,
} from './payment-method-service.ts';
import { defineBillingRoute as defineRoute, type BillingServices } from './services.ts';

const tags = ['Payment methods'];
const read = { permission: 'payment_methods.read', resourceType: 'user' } as const;
const write = { permission: 'payment_methods.write', resourceType: 'user' } as const;
const pmParams = z.strictObject({ pm_id: uuid() });

/** Attaching tries a card at the gateway: a budget per caller and per address keeps card testing slow. */
export const ATTACH_LIMITS: RateLimitRule<BillingServices>[] = [
  { name: 'payment-method-attach:caller', limit: 10, windowSeconds: 3600, by: 'caller' },
  { name: 'payment-method-attach:ip', limit: 30, windowSeconds: 3600, by: 'ip' },
];

/** A run of 12 or more digits: a card number sent where a token belongs. */
const LOOKS_LIKE_A_CARD_NUMBER = /\d{12,}/;

const testTokens = Object.entries(TEST_TOKENS).map(([token, card]) => `\`${token}\` — ${card.describe}`).join('; ');

export const listPaymentMethodsRoute = defineRoute({
  method: 'get', path: '/v1/payment-methods', tags, access: read,
  summary: 'List my payment methods',
  description: `The default first, then the newest first; at most ${MAX_PAYMENT_METHODS_PER_USER}. \`is_expired\` is true once the expiry month has ended (UTC).`,
  responses: { 200: list(paymentMethodRecord) },
  async handler({ rc, app }) {
    const now = app.clock.now().getTime();
    return (await listPaymentMethods(rc)).map((m) => presentPaymentMethod(m, now));
  },
});

export const attachPaymentMethodRoute = defineRoute({
  method: 'post', path: '/v1/payment-methods', tags, access: write,
  summary: 'Attach a payment method from a gateway token',
  description: 'Send the token a client-side payment SDK returned, never card data (a value that looks like a card number is refused). '
    + 'The first method becomes the default; `set_as_default` moves the default to the new one, and with it the subscriptions that follow the default '
    + '(no method chosen for them): an open renewal invoice of theirs (past due) is charged to the new card at once. '
    + `Limits: ${MAX_PAYMENT_METHODS_PER_USER} methods per user (409), ${ATTACH_LIMITS[0]!.limit} attaches per hour per caller (429). `
    + 'A token the gateway does not know is a 400 on payment_method_token; a card the gateway refuses is a 402 PAYMENT_FAILED with `decline_code` '
    + '(expired_card, card_declined); an unreachable gateway is a 503 (retry with the same Idempotency-Key). '
    + `The test gateway (PAYMENT_GATEWAY=test) knows these tokens: ${testTokens}.`,
  body: withExample(z.strictObject({
    payment_method_token: z.string().min(1).max(255)
      .regex(/^[A-Za-z0-9_.-]+$/, 'Must be a token from the payment SDK')
      .refine((v) => !LOOKS_LIKE_A_CARD_NUMBER.test(v), 'Must be a token from the payment SDK, never a card number'),
    set_as_default: z.boolean().default(false),
    billing_name: lineText(100).optional(),
  }), { payment_method_token: 'tok_visa', set_as_default: true, billing_name: 'Ada Lovelace' }),
  idempotent: true,
  rateLimits: ATTACH_LIMITS,
  responses: { 201: data(paymentMethodResource) },
  errors: ['PAYMENT_FAILED', 'CONFLICT'],
  async handler({ body, rc, app, ctx }) {
    const method = await attachPaymentMethod(app, rc, { ...body, idempotencyKey: ctx.get('idempotency-key') || undefined });
    return reply.created(presentPaymentMethod(method, app.clock.now().getTime()), `/v1/payment-methods/${method.id}`);
  },
});

// Declared before the parameter route for readability only: the radix tree prefers the static segment anyway.
export const readDefaultPaymentMethodRoute = defineRoute({
  method: 'get', path: '/v1/payment-methods/default', tags, access: read,
  summary: 'Read my default payment method',
  description: '404 when no method is saved.',
  responses: { 200: data(paymentMethodResource) },
  async handler({ rc, app }) {
    return presentPaymentMethod(await readDefaultPaymentMethod(rc), app.clock.now().getTime());
  },
});

export const readPaymentMethodRoute = defineRoute({
  method: 'get', path: '/v1/payment-methods/:pm_id', tags, access: read,
  summary: 'Read a payment method',
  description: 'Another user\'s method is a 404 (an administrator may read anyone\'s).',
  params: pmParams,
  responses: { 200: data(paymentMethodResource) },
  async handler({ params, rc, app }) {
    return presentPaymentMethod(await findActionablePaymentMethod(rc.em, rc, params.pm_id), app.clock.now().getTime());
  },
});

export const makeDefaultPaymentMethodRoute = defineRoute({
  method: 'post', path: '/v1/payment-methods/:pm_id/default', tags, access: write,
  summary: 'Make a payment method the default',
  description: 'The previous default stops being one. Subscriptions that follow the default (no method chosen for them) are billed to this one from now on, '
    + 'and an open renewal invoice of theirs (past due) is charged to it at once. Another user\'s method is a 404 (an administrator may act on anyone\'s; audit-logged).',
  params: pmParams,
  responses: { 200: data(paymentMethodResource) },
  errors: ['CONFLICT'],
  async handler({ params, rc, app }) {
    return presentPaymentMethod(await makeDefaultPaymentMethod(app, rc, params.pm_id), app.clock.now().getTime());
  },
});

export const deletePaymentMethodRoute = defineRoute({
  method: 'delete', path: '/v1/payment-methods/:pm_id', tags, access: write,
  summary: 'Delete a payment method',
  description: 'The default cannot be deleted while a subscription is live (trialing, active, past_due, paused): 409 DEFAULT_PAYMENT_METHOD_IN_USE. '
    + 'Otherwise, deleting the default makes the newest remaining method the default, and live subscriptions billed to a deleted '
    + 'non-default method are billed to the default from then on. Another user\'s method is a 404 (an administrator may delete anyone\'s; audit-logged).',
  params: pmParams,
  responses: { 204: empty },
  errors: ['DEFAULT_PAYMENT_METHOD_IN_USE', 'CONFLICT'],
  async handler({ params, rc, app }) {
    await deletePaymentMethod(app, rc, params.pm_id);
  },
});

export const paymentMethodRoutes = [
  listPaymentMethodsRoute, attachPaymentMethodRoute, readDefaultPaymentMethodRoute, readPaymentMethodRoute,
  makeDefaultPaymentMethodRoute, deletePaymentMethodRoute,
];
