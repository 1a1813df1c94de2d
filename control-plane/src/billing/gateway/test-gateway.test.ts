// The built-in test gateway: the well-known tokens at attach, and charges,
// refunds and idempotent replays as the billing engine will use them.
import t from 'tap';
import { loadConfig } from '../../config/config.ts';
import { cardExpired, createPaymentGateway, GatewayError, TEST_TOKENS, TestPaymentGateway, type ChargeResult } from './index.ts';

let nowMs = Date.UTC(2026, 4, 15, 12); // 15 May 2026
const gateway = new TestPaymentGateway(() => nowMs);
const customerRef = crypto.randomUUID();
let keys = 0;
const key = () => `key-${++keys}`;

async function refusal(promise: Promise<unknown>): Promise<GatewayError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error('expected a GatewayError');
}

const charge = (paymentMethodId: string, amountMinor = 999, idempotencyKey = key()) =>
  gateway.charge({ paymentMethodId, customerRef, amountMinor, currency: 'EUR', idempotencyKey });

t.test('attach turns each well-known token into a method with display details only', async (t) => {
  const visa = await gateway.attach({ token: 'tok_visa', customerRef });
  t.match(visa, { type: 'card', brand: 'visa', last4: '4242', exp_month: 12, exp_year: 2030, funding: 'credit', country: 'US', billing_country: 'US', wallet_email: null });
  t.match(visa.id, /^pm_test_visa_203012_[a-zA-F]{16}$/);
  t.notOk(/\d{13,}/.test(JSON.stringify(visa)), 'no card number anywhere');
  t.not((await gateway.attach({ token: 'tok_visa', customerRef })).id, visa.id, 'each attach is a new method');
  t.match(await gateway.attach({ token: 'tok_mastercard', customerRef }), { brand: 'mastercard', last4: '4444' });
  t.match(await gateway.attach({ token: 'tok_amex', customerRef }), { brand: 'amex', last4: '8431' });
  t.match(await gateway.attach({ token: 'tok_visa_debit', customerRef }), { brand: 'visa', funding: 'debit' });
  t.match(await gateway.attach({ token: 'tok_fr', customerRef }), { country: 'FR', billing_country: 'FR' });
  t.match(await gateway.attach({ token: 'tok_visa_expiring', customerRef }), { exp_month: 5, exp_year: 2026 }, 'expires at the end of the current month');
  t.match(await gateway.attach({ token: 'tok_paypal', customerRef }), { type: 'paypal', brand: null, last4: null, exp_month: null, wallet_email: 'buyer@example.com' });
  t.ok(Object.keys(TEST_TOKENS).includes('tok_chargeDeclined') && Object.keys(TEST_TOKENS).includes('tok_insufficientFunds'));
});

t.test('attach refuses unknown tokens, expired and declined cards, and reports an unreachable provider', async (t) => {
  for (const token of ['tok_unknown', '', 'constructor', '__proto__', 'toString']) {
    t.equal((await refusal(gateway.attach({ token, customerRef }))).kind, 'invalid_token', JSON.stringify(token));
  }
  t.match(await refusal(gateway.attach({ token: 'tok_expired', customerRef })), { kind: 'card_declined', reason: 'expired_card' });
  t.match(await refusal(gateway.attach({ token: 'tok_cardDeclined', customerRef })), { kind: 'card_declined', reason: 'card_declined' });
  t.match(await refusal(gateway.attach({ token: 'tok_gatewayUnavailable', customerRef })), { kind: 'unavailable' });
});

t.test('charge: good cards succeed; tok_chargeDeclined, tok_insufficientFunds and tok_processingError attach but every charge is declined', async (t) => {
  const ok = await charge((await gateway.attach({ token: 'tok_visa', customerRef })).id, 1250);
  t.match(ok, { status: 'succeeded', amountMinor: 1250, currency: 'EUR' });
  t.match((ok as { chargeId: string }).chargeId, /^ch_test_/);
  t.match(await charge((await gateway.attach({ token: 'tok_paypal', customerRef })).id), { status: 'succeeded' });
  for (const [token, reason] of [['tok_chargeDeclined', 'card_declined'], ['tok_insufficientFunds', 'insufficient_funds'], ['tok_processingError', 'processing_error']] as const) {
    const method = await gateway.attach({ token, customerRef });
    t.match(await charge(method.id), { status: 'declined', reason }, token);
    t.match(await charge(method.id), { status: 'declined', reason }, `${token}, every time`);
  }
});

t.test('charge: a card is declined as expired_card from the first day after its expiry month', async (t) => {
  t.teardown(() => { nowMs = Date.UTC(2026, 4, 15, 12); });
  const expiring = await gateway.attach({ token: 'tok_visa_expiring', customerRef });
  nowMs = Date.UTC(2026, 5, 1) - 1;
  t.match(await charge(expiring.id), { status: 'succeeded' }, 'the last millisecond of May');
  nowMs = Date.UTC(2026, 5, 1);
  t.match(await charge(expiring.id), { status: 'declined', reason: 'expired_card' }, '1 June, 00:00 UTC');
});

t.test('a charge with the same idempotency key is charged once; the same key with other parameters is refused', async (t) => {
  const method = await gateway.attach({ token: 'tok_visa', customerRef });
  const k = key();
  const first = await charge(method.id, 500, k);
  t.same(await charge(method.id, 500, k), first, 'the same answer, the same charge id');
  t.equal((await refusal(charge(method.id, 600, k))).kind, 'invalid_request');
  const declinedKey = key();
  const declinedMethod = await gateway.attach({ token: 'tok_chargeDeclined', customerRef });
  t.same(await charge(declinedMethod.id, 500, declinedKey), await charge(declinedMethod.id, 500, declinedKey));
});

t.test('charge refuses bad amounts, currencies and unknown methods', async (t) => {
  const method = await gateway.attach({ token: 'tok_visa', customerRef });
  for (const amountMinor of [0, -5, 9.99, Number.NaN, 2 ** 60]) t.equal((await refusal(charge(method.id, amountMinor))).kind, 'invalid_request', String(amountMinor));
  t.equal((await refusal(gateway.charge({ paymentMethodId: method.id, customerRef, amountMinor: 100, currency: 'eur', idempotencyKey: key() }))).kind, 'invalid_request');
  for (const id of ['pm_unknown', 'pm_test_visa_203012_short', 'pm_test_expired_203012_abcdefghijklmnop', 'pm_test_nosuch_203012_abcdefghijklmnop']) {
    t.equal((await refusal(charge(id))).kind, 'not_found', id);
  }
});

t.test('refund: partial, then the rest; never beyond the charge; once per key', async (t) => {
  const method = await gateway.attach({ token: 'tok_visa', customerRef });
  const paid = await charge(method.id, 1000) as Extract<ChargeResult, { status: 'succeeded' }>;
  const k = key();
  const part = await gateway.refund({ chargeId: paid.chargeId, amountMinor: 300, idempotencyKey: k });
  t.match(part, { chargeId: paid.chargeId, amountMinor: 300, currency: 'EUR' });
  t.same(await gateway.refund({ chargeId: paid.chargeId, amountMinor: 300, idempotencyKey: k }), part, 'a replay refunds nothing more');
  t.equal((await refusal(gateway.refund({ chargeId: paid.chargeId, amountMinor: 701, idempotencyKey: key() }))).kind, 'invalid_request', 'beyond what remains');
  t.match(await gateway.refund({ chargeId: paid.chargeId, idempotencyKey: key() }), { amountMinor: 700 }, 'the remainder by default');
  t.equal((await refusal(gateway.refund({ chargeId: paid.chargeId, idempotencyKey: key() }))).kind, 'invalid_request', 'nothing left');
  t.equal((await refusal(gateway.refund({ chargeId: 'ch_test_unknown', idempotencyKey: key() }))).kind, 'not_found');
  await gateway.detach(method.id);
  await gateway.detach('pm_unknown');
  t.pass('detach accepts known and unknown ids');
});

t.test('cardExpired: the expiry month is included, whatever the time zone', async (t) => {
  t.equal(cardExpired(12, 2030, Date.UTC(2030, 11, 31, 23, 59, 59, 999)), false);
  t.equal(cardExpired(12, 2030, Date.UTC(2031, 0, 1)), true);
  t.equal(cardExpired(2, 2028, Date.UTC(2028, 1, 29, 12)), false, 'leap day');
  t.equal(cardExpired(2, 2028, Date.UTC(2028, 2, 1)), true);
  t.equal(cardExpired(null, null, Date.UTC(2100, 0, 1)), false, 'no expiry: a wallet');
});

t.test('PAYMENT_GATEWAY chooses the gateway: test by default, named explicitly in production', async (t) => {
  t.equal(createPaymentGateway(loadConfig({}), Date.now).name, 'test');
  t.equal(loadConfig({}).PAYMENT_GATEWAY, 'test');
  t.throws(() => loadConfig({ PAYMENT_GATEWAY: 'stripe' }), /^PAYMENT_GATEWAY: /);
  t.throws(() => loadConfig({ NODE_ENV: 'production', SECRETS_KEY: 'k'.repeat(32) }), /^PAYMENT_GATEWAY: required when NODE_ENV=production/);
  t.equal(loadConfig({ NODE_ENV: 'production', PAYMENT_GATEWAY: 'test' }).PAYMENT_GATEWAY, 'test');
});
