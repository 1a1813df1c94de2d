// The payment gateway (DESIGN.md §3): the one object through which billing
// tokenizes, charges, refunds and detaches. No raw card data ever enters the
// system: a client-side SDK turns the card into a token, the gateway turns the
// token into a payment method it keeps, and we store its id with the few
// displayable details it reports (brand, last four digits, expiry, billing
// country, wallet e-mail). Money is in integer minor units of the currency.
// Implementations: the built-in test gateway (test-gateway.ts); a real
// provider implements the same interface and is chosen by PAYMENT_GATEWAY.

export const PAYMENT_METHOD_TYPES = ['card', 'paypal'] as const;
export type PaymentMethodType = (typeof PAYMENT_METHOD_TYPES)[number];

export type CardFunding = 'credit' | 'debit' | 'prepaid' | 'unknown';

/** What the gateway reports about a payment method it holds (never the card number). */
export interface GatewayPaymentMethod {
  /** The gateway's id of the method, used for every later charge. */
  id: string;
  type: PaymentMethodType;
  /** Card brand (visa, mastercard, amex); null for wallets. */
  brand: string | null;
  last4: string | null;
  exp_month: number | null;
  exp_year: number | null;
  funding: CardFunding | null;
  /** Issuing country of a card, or the wallet's country (ISO 3166-1 alpha-2). */
  country: string | null;
  /** Billing name the client SDK collected with the card, if any. */
  billing_name: string | null;
  /** Billing address country the client SDK collected (falls back to the issuing country). */
  billing_country: string | null;
  /** The wallet account's e-mail (wallet types only). */
  wallet_email: string | null;
}

export interface AttachInput {
  /** Single-use token from the client-side SDK. */
  token: string;
  /** Our id of the customer the method is attached for (the user). */
  customerRef: string;
  /** Passed on to the provider so a retried attach creates one method. */
  idempotencyKey?: string;
}

/** Why a charge or an attach was refused by the card network or the gateway. */
export const DECLINE_REASONS = ['card_declined', 'insufficient_funds', 'expired_card', 'processing_error'] as const;
export type DeclineReason = (typeof DECLINE_REASONS)[number];

export interface ChargeInput {
  paymentMethodId: string;
  customerRef: string;
  /** Integer minor units (cents for EUR/USD, yen for JPY); above zero. */
  amountMinor: number;
  /** ISO 4217, upper case. */
  currency: string;
  /** Required: a retried charge with the same key is charged once and answers the same. */
  idempotencyKey: string;
  description?: string;
}

export type ChargeResult =
  | { status: 'succeeded'; chargeId: string; amountMinor: number; currency: string }
  | { status: 'declined'; reason: DeclineReason; message: string };

export interface RefundInput {
  chargeId: string;
  /** Integer minor units; the whole remaining amount when omitted. */
  amountMinor?: number;
  idempotencyKey: string;
  reason?: string;
}

export interface RefundResult {
  refundId: string;
  chargeId: string;
  amountMinor: number;
  currency: string;
}

export type GatewayErrorKind =
  /** The token is unknown, malformed or already used. */
  | 'invalid_token'
  /** The card was refused when attached (reason says why, e.g. expired_card). */
  | 'card_declined'
  /** A charge or payment method id the gateway does not know. */
  | 'not_found'
  /** A refund beyond what was charged, a non-positive amount, a bad currency. */
  | 'invalid_request'
  /** The provider cannot be reached or failed; the operation may be retried. */
  | 'unavailable';

export class GatewayError extends Error {
  readonly kind: GatewayErrorKind;
  readonly reason?: DeclineReason;
  constructor(kind: GatewayErrorKind, message: string, reason?: DeclineReason) {
    super(message);
    this.name = 'GatewayError';
    this.kind = kind;
    this.reason = reason;
  }
}

/**
 * A payment provider. Every method may throw GatewayError; declines of a
 * charge are a result, not an error (billing decides what they mean).
 */
export interface PaymentGateway {
  /** The provider's name, stored with each payment method (`test`, `stripe`, …). */
  readonly name: string;
  /** Turns a client-side token into a payment method held by the gateway for the customer. */
  attach(input: AttachInput): Promise<GatewayPaymentMethod>;
  /** Charges a held payment method. */
  charge(input: ChargeInput): Promise<ChargeResult>;
  /** Refunds all or part of a succeeded charge. */
  refund(input: RefundInput): Promise<RefundResult>;
  /** Forgets a payment method at the gateway (after it is deleted here). Unknown ids are not an error. */
  detach(paymentMethodId: string): Promise<void>;
}

/**
 * True once a card's expiry month has ended: a card marked 12/2030 works
 * through 31 December 2030 and is expired from 1 January 2031, 00:00 UTC.
 * Methods without an expiry (wallets) never expire.
 */
export function cardExpired(expMonth: number | null | undefined, expYear: number | null | undefined, nowMs: number): boolean {
  if (!expMonth || !expYear) return false;
  return nowMs >= Date.UTC(expYear, expMonth, 1); // month is 1-based here, so this is the first day of the next month
}
