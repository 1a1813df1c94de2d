// The built-in test gateway (PAYMENT_GATEWAY=test): in-process, takes no
// money, and answers deterministically for a fixed set of well-known tokens,
// like a provider's test cards. What a method does when charged is written
// into its gateway id (`pm_test_<kind>_<yyyymm>_<random>`), so any replica,
// and the same process after a restart, charges it the same way. Charges are
// remembered in memory for refunds and idempotent replays.
import { createHash, randomBytes } from 'node:crypto';
import {
  cardExpired, GatewayError, type AttachInput, type ChargeInput, type ChargeResult, type DeclineReason, type GatewayPaymentMethod,
  type PaymentGateway, type RefundInput, type RefundResult,
} from './payment-gateway.ts';

type Expiry = 'years' | 'this_month';
interface TestCard {
  kind: string;
  describe: string;
  method?: Omit<GatewayPaymentMethod, 'id' | 'exp_month' | 'exp_year' | 'billing_name'>;
  expiry?: Expiry;
  /** Refused at attach. */
  attachError?: GatewayError;
  /** Every charge is declined with this reason. */
  declines?: DeclineReason;
}

const card = (brand: string, last4: string, funding: 'credit' | 'debit' = 'credit', country = 'US') => ({
  type: 'card' as const, brand, last4, funding, country, billing_country: country, wallet_email: null,
});

/** The tokens the test gateway knows, and what each does (listed in OpenAPI and docs/decisions.md). */
export const TEST_TOKENS: Readonly<Record<string, TestCard>> = {
  tok_visa: { kind: 'visa', describe: 'Visa •••• 4242, succeeds', method: card('visa', '4242'), expiry: 'years' },
  tok_mastercard: { kind: 'mastercard', describe: 'Mastercard •••• 4444, succeeds', method: card('mastercard', '4444'), expiry: 'years' },
  tok_amex: { kind: 'amex', describe: 'American Express •••• 8431, succeeds', method: card('amex', '8431'), expiry: 'years' },
  tok_visa_debit: { kind: 'visadebit', describe: 'Visa debit •••• 5556, succeeds', method: card('visa', '5556', 'debit'), expiry: 'years' },
  tok_fr: { kind: 'fr', describe: 'Visa •••• 0003 issued in France, succeeds', method: card('visa', '0003', 'credit', 'FR'), expiry: 'years' },
  tok_visa_expiring: { kind: 'expiring', describe: 'Visa •••• 1881 expiring at the end of the current month, succeeds until then', method: card('visa', '1881'), expiry: 'this_month' },
  tok_paypal: {
    kind: 'paypal', describe: 'PayPal wallet buyer@example.com, succeeds',
    method: { type: 'paypal', brand: null, last4: null, funding: null, country: 'US', billing_country: 'US', wallet_email: 'buyer@example.com' },
  },
  tok_chargeDeclined: { kind: 'declined', describe: 'Visa •••• 0341: attaches, every charge is declined (card_declined)', method: card('visa', '0341'), expiry: 'years', declines: 'card_declined' },
  tok_insufficientFunds: { kind: 'nofunds', describe: 'Visa •••• 9995: attaches, every charge is declined (insufficient_funds)', method: card('visa', '9995'), expiry: 'years', declines: 'insufficient_funds' },
  tok_processingError: { kind: 'procerr', describe: 'Visa •••• 0119: attaches, every charge fails (processing_error)', method: card('visa', '0119'), expiry: 'years', declines: 'processing_error' },
  tok_expired: { kind: 'expired', describe: 'Visa •••• 0069: refused at attach (expired_card)', attachError: new GatewayError('card_declined', 'The card has expired', 'expired_card') },
  tok_cardDeclined: { kind: 'attachdecline', describe: 'Visa •••• 0002: refused at attach (card_declined)', attachError: new GatewayError('card_declined', 'The card was declined', 'card_declined') },
  tok_gatewayUnavailable: { kind: 'unavailable', describe: 'the provider cannot be reached: attach fails as unavailable (retry later)', attachError: new GatewayError('unavailable', 'The payment provider is unavailable') },
};

const KINDS = new Map(Object.values(TEST_TOKENS).map((c) => [c.kind, c]));
const METHOD_ID = /^pm_test_([a-z]+)_(\d{6}|none)_[a-zA-F]{16}$/;

/** 16 random letters (80 bits): an id without digit runs, so it can never pass for a card number. */
function randomLetters(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEF';
  return [...randomBytes(16)].map((b) => alphabet[b & 31]).join('');
}

const declineMessages: Record<DeclineReason, string> = {
  card_declined: 'The card was declined',
  insufficient_funds: 'The card has insufficient funds',
  expired_card: 'The card has expired',
  processing_error: 'An error occurred while processing the card',
};

interface ChargeRecord {
  id: string;
  amountMinor: number;
  currency: string;
  refundedMinor: number;
}

export class TestPaymentGateway implements PaymentGateway {
  readonly name = 'test';
  readonly #now: () => number;
  readonly #charges = new Map<string, ChargeRecord>();
  /** Idempotency keys of charges and refunds → fingerprint of the request and its answer. */
  readonly #replays = new Map<string, { fingerprint: string; result: ChargeResult | RefundResult }>();

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  async attach(input: AttachInput): Promise<GatewayPaymentMethod> {
    const test = Object.hasOwn(TEST_TOKENS, input.token) ? TEST_TOKENS[input.token]! : undefined;
    if (!test) throw new GatewayError('invalid_token', 'Unknown payment token (the test gateway knows tok_visa, tok_mastercard, … ; see the API reference)');
    if (test.attachError) throw test.attachError;
    const now = new Date(this.#now());
    let exp_month: number | null = null;
    let exp_year: number | null = null;
    if (test.expiry === 'years') {
      exp_month = 12;
      exp_year = now.getUTCFullYear() + 4;
    } else if (test.expiry === 'this_month') {
      exp_month = now.getUTCMonth() + 1;
      exp_year = now.getUTCFullYear();
    }
    const expiry = exp_month && exp_year ? `${exp_year}${String(exp_month).padStart(2, '0')}` : 'none';
    const id = `pm_test_${test.kind}_${expiry}_${randomLetters()}`;
    return { id, ...test.method!, exp_month, exp_year, billing_name: null };
  }

  async charge(input: ChargeInput): Promise<ChargeResult> {
    if (!Number.isSafeInteger(input.amountMinor) || input.amountMinor <= 0) throw new GatewayError('invalid_request', 'The amount must be a positive integer of minor units');
    if (!/^[A-Z]{3}$/.test(input.currency)) throw new GatewayError('invalid_request', 'The currency must be an ISO 4217 code in upper case');
    return this.#once(`charge:${input.idempotencyKey}`, fingerprint(input), () => {
      const { card: test, expMonth, expYear } = parseMethodId(input.paymentMethodId);
      if (cardExpired(expMonth, expYear, this.#now())) return decline('expired_card');
      if (test.declines) return decline(test.declines);
      const charge: ChargeRecord = { id: `ch_test_${randomBytes(12).toString('hex')}`, amountMinor: input.amountMinor, currency: input.currency, refundedMinor: 0 };
      this.#charges.set(charge.id, charge);
      return { status: 'succeeded', chargeId: charge.id, amountMinor: charge.amountMinor, currency: charge.currency };
    });
  }

  async refund(input: RefundInput): Promise<RefundResult> {
    return this.#once(`refund:${input.idempotencyKey}`, fingerprint(input), () => {
      const charge = this.#charges.get(input.chargeId);
      if (!charge) throw new GatewayError('not_found', 'Unknown charge');
      const remaining = charge.amountMinor - charge.refundedMinor;
      const amount = input.amountMinor ?? remaining;
      if (!Number.isSafeInteger(amount) || amount <= 0) throw new GatewayError('invalid_request', 'The refund amount must be a positive integer of minor units');
      if (amount > remaining) throw new GatewayError('invalid_request', `Only ${remaining} minor units of this charge remain to refund`);
      charge.refundedMinor += amount;
      return { refundId: `re_test_${randomBytes(12).toString('hex')}`, chargeId: charge.id, amountMinor: amount, currency: charge.currency };
    });
  }

  async detach(paymentMethodId: string): Promise<void> {
    // Nothing is held per method: the id carries its behaviour. Unknown ids are fine (interface contract).
    void paymentMethodId;
  }

  /** Runs an operation once per idempotency key; the same key with other parameters is refused. */
  #once<R extends ChargeResult | RefundResult>(key: string, print: string, run: () => R): R {
    const previous = this.#replays.get(key);
    if (previous) {
      if (previous.fingerprint !== print) throw new GatewayError('invalid_request', 'This idempotency key was used with other parameters');
      return previous.result as R;
    }
    const result = run();
    this.#replays.set(key, { fingerprint: print, result });
    return result;
  }
}

function decline(reason: DeclineReason): ChargeResult {
  return { status: 'declined', reason, message: declineMessages[reason] };
}

function fingerprint(input: object): string {
  return createHash('sha256').update(JSON.stringify(input)).digest('hex');
}

function parseMethodId(id: string): { card: TestCard; expMonth: number | null; expYear: number | null } {
  const match = METHOD_ID.exec(id);
  const test = match ? KINDS.get(match[1]!) : undefined;
  if (!match || !test || !test.method) throw new GatewayError('not_found', 'Unknown payment method');
  const expiry = match[2]!;
  return expiry === 'none'
    ? { card: test, expMonth: null, expYear: null }
    : { card: test, expYear: Number(expiry.slice(0, 4)), expMonth: Number(expiry.slice(4)) };
}
