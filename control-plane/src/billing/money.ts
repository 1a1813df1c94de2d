// Money, exactly (issue 10; DESIGN.md: integer minor units with ISO 4217
// exponents, JSON numbers only at the API edge). Every amount billing keeps or
// computes is an integer count of the currency's minor unit (EUR cents,
// JPY yen, KWD fils: exponent 2, 0, 3), never a floating-point fraction.
//
// The currency table is dinero.js's ISO 4217 list (2.0.2, pinned), and its
// half-up division on its bigint calculator is the rounding; arithmetic runs
// on bigint, so intermediate products (an amount times a period's seconds)
// never lose precision.
//
// Rounding, written down once (docs/decisions.md "Money"):
// - one amount derived from another (a percentage, a prorated share) is
//   rounded half up to the minor unit: 0.5 of a cent becomes a cent;
// - an amount split into parts (allocation) is not rounded part by part:
//   largest remainders, so the parts always add up to the whole.
import * as dinero from 'dinero.js/bigint';

export interface Currency {
  /** ISO 4217 alphabetic code, e.g. EUR. */
  code: string;
  /** Decimal places of the minor unit: JPY 0, EUR 2, KWD 3. */
  exponent: number;
}

type DineroCurrency = { code: string; base: bigint | readonly bigint[]; exponent: bigint };
const isCurrencyEntry = (value: unknown): value is DineroCurrency =>
  typeof value === 'object' && value !== null && 'code' in value && 'exponent' in value && 'base' in value;

/** Every ISO 4217 currency, by code (active codes, fund codes included; no precious metals or testing codes). */
export const CURRENCIES: ReadonlyMap<string, Currency> = new Map(
  Object.values(dinero)
    .filter(isCurrencyEntry)
    .filter((c) => c.base === 10n) // decimal currencies (all ISO 4217 ones are)
    .map((c) => [c.code, { code: c.code, exponent: Number(c.exponent) }] as const)
    .sort(([a], [b]) => a.localeCompare(b)),
);

/**
 * The largest amount kept, in minor units (10^12 − 1: 9,999,999,999.99 EUR,
 * 999,999,999,999 JPY). Far above any price or balance, and low enough that
 * an amount with its decimals has at most 15 significant digits, so the JSON
 * number shown for it reads back as exactly the same amount.
 */
export const MAX_MINOR = 999_999_999_999;

export class MoneyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MoneyError';
  }
}

export function isCurrencyCode(code: string): boolean {
  return CURRENCIES.has(code);
}

/** The currency of an ISO 4217 code (upper case); throws MoneyError for any other string. */
export function currencyOf(code: string): Currency {
  const found = CURRENCIES.get(code);
  if (!found) throw new MoneyError(`${code} is not an ISO 4217 currency code`);
  return found;
}

const DECIMAL = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/;

/**
 * The exact decimal a JSON number stands for, as digits and a count of
 * decimals. A JSON number reaches us as an IEEE double (RFC 8259 §6); its
 * shortest round-trip form (what JSON.stringify prints) is the decimal the
 * client wrote whenever it had at most 15 significant digits.
 */
function decimalOf(value: number): { digits: bigint; decimals: number } {
  const match = DECIMAL.exec(String(value));
  if (!match) throw new MoneyError('Must be a finite, non-negative number');
  const [, whole, fraction = '', exponentText = '0'] = match;
  let digits = BigInt(`${whole}${fraction}`);
  let decimals = fraction.length - Number(exponentText);
  if (decimals < 0) {
    digits *= 10n ** BigInt(-decimals);
    decimals = 0;
  }
  return { digits, decimals };
}

/**
 * `value` as an integer count of 10^-decimals units (9.99 with 2 decimals →
 * 999), exactly; throws MoneyError for NaN, infinities, negative values and
 * more decimals than allowed.
 */
export function toScaledInteger(value: number, decimals: number, max = MAX_MINOR): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new MoneyError('Must be a finite number');
  if (value < 0) throw new MoneyError('Must not be negative');
  const { digits, decimals: given } = decimalOf(value === 0 ? 0 : value);
  if (given > decimals) {
    throw new MoneyError(decimals === 0 ? 'Must be a whole number (this currency has no minor unit)' : `Must have at most ${decimals} decimal place${decimals === 1 ? '' : 's'}`);
  }
  const scaled = digits * 10n ** BigInt(decimals - given);
  if (scaled > BigInt(max)) throw new MoneyError(`Must be at most ${fromScaledInteger(max, decimals)}`);
  return Number(scaled);
}

/** An integer count of 10^-decimals units as the JSON number it stands for (999, 2 → 9.99). */
export function fromScaledInteger(scaled: number, decimals: number): number {
  assertMinor(scaled, 'amount', true);
  // Division of two exactly represented integers is correctly rounded: the double nearest to the
  // decimal, which is the one its shortest form prints (999 / 100 prints as 9.99).
  return decimals === 0 ? scaled : scaled / 10 ** decimals;
}

/** A price or balance sent as a JSON number in major units (9.99 EUR) → minor units (999); throws MoneyError. */
export function toMinor(amount: number, currency: string): number {
  return toScaledInteger(amount, currencyOf(currency).exponent);
}

/** Minor units → the JSON number the API shows (999 EUR → 9.99; 500 JPY → 500; 1500 KWD → 1.5). */
export function toMajor(minor: number, currency: string): number {
  return fromScaledInteger(minor, currencyOf(currency).exponent);
}

/** Why `amount` is not a valid amount of `currency`, or undefined when it is (for validation messages). */
export function amountProblem(amount: number, currency: string): string | undefined {
  if (!isCurrencyCode(currency)) return undefined; // the currency field reports that
  try {
    toMinor(amount, currency);
    return undefined;
  } catch (error) {
    if (error instanceof MoneyError) return error.message;
    throw error;
  }
}

function assertMinor(value: number, what: string, allowNegative = false): void {
  if (!Number.isSafeInteger(value) || (!allowNegative && value < 0)) {
    throw new MoneyError(`${what} must be a ${allowNegative ? '' : 'non-negative '}safe integer of minor units, got ${value}`);
  }
}

const toBig = (value: number, what: string) => {
  assertMinor(value, what);
  return BigInt(value);
};

function toSafeNumber(value: bigint): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new MoneyError(`Result ${value} is beyond the safe integer range`);
  return n;
}

/** numerator / denominator rounded half up: the one rounding rule of billing. */
function roundHalfUp(numerator: bigint, denominator: bigint): bigint {
  return dinero.halfUp(numerator, denominator, dinero.calculator);
}

/** Hundredths of a percent in a whole: 100 % = 10,000 basis points. */
export const BASIS_POINTS = 10_000;

/** `basisPoints` hundredths of a percent of `minor`, rounded half up (15 % = 1500 of 999 → 150). */
export function percentOf(minor: number, basisPoints: number): number {
  if (!Number.isSafeInteger(basisPoints) || basisPoints < 0 || basisPoints > BASIS_POINTS) {
    throw new MoneyError(`A percentage must be 0..${BASIS_POINTS} basis points, got ${basisPoints}`);
  }
  return toSafeNumber(roundHalfUp(toBig(minor, 'amount') * BigInt(basisPoints), BigInt(BASIS_POINTS)));
}

/**
 * The share of `minor` that `part` of `whole` stands for (the unused seconds
 * of a billing period), rounded half up. 0 ≤ part ≤ whole, whole > 0.
 */
export function prorate(minor: number, part: number, whole: number): number {
  const amount = toBig(minor, 'amount');
  if (!Number.isSafeInteger(whole) || whole <= 0) throw new MoneyError(`The whole must be a positive integer, got ${whole}`);
  if (!Number.isSafeInteger(part) || part < 0 || part > whole) throw new MoneyError(`The part must be an integer in 0..${whole}, got ${part}`);
  return toSafeNumber(roundHalfUp(amount * BigInt(part), BigInt(whole)));
}

/**
 * `minor` split in proportion to `ratios` (non-negative integers, not all 0),
 * by largest remainders: each part gets its floor share, and the units left
 * over go one each to the parts whose exact shares had the largest fractions
 * (ties: the earlier part). The parts add up to `minor` exactly, and each is
 * within one unit of its exact share.
 */
export function split(minor: number, ratios: readonly number[]): number[] {
  const amount = toBig(minor, 'amount');
  if (ratios.length === 0) throw new MoneyError('Nothing to split into');
  const weights = ratios.map((r) => toBig(r, 'a ratio'));
  const total = weights.reduce((a, b) => a + b, 0n);
  if (total === 0n) throw new MoneyError('At least one ratio must be above 0');
  const parts = weights.map((w) => (amount * w) / total);
  const fractions = weights.map((w, index) => ({ index, remainder: (amount * w) % total }));
  let left = amount - parts.reduce((a, b) => a + b, 0n);
  fractions.sort((a, b) => (a.remainder === b.remainder ? a.index - b.index : a.remainder > b.remainder ? -1 : 1));
  for (const { index } of fractions) {
    if (left === 0n) break;
    parts[index]! += 1n;
    left -= 1n;
  }
  return parts.map(toSafeNumber);
}

/** Adds amounts of one currency (minor units), refusing a sum beyond the safe range. */
export function sumMinor(amounts: readonly number[]): number {
  return toSafeNumber(amounts.reduce((total, a) => total + toBig(a, 'amount'), 0n));
}
