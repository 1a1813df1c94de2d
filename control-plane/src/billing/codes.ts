// Codes people type: coupon codes an administrator chooses or the server
// makes, and gift-card codes the server makes. Generated codes use Crockford's
// base32 alphabet (digits and capitals without I, L, O, U), so they read
// aloud and type without ambiguity; what a person types back is normalised
// (case, spaces and dashes ignored; O read as 0, I and L as 1).
import { createHmac, randomBytes } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** `length` random symbols of the alphabet, 5 bits each (256 is a multiple of 32, so every symbol is equally likely). */
export function randomCode(length: number): string {
  const bytes = randomBytes(length);
  let code = '';
  for (const byte of bytes) code += ALPHABET[byte & 31];
  return code;
}

// ---- coupons -------------------------------------------------------------------------

/** A coupon code as administrators write it: 3..50 letters, digits, - and _ (kept in upper case). */
export const COUPON_CODE = /^[A-Za-z0-9][A-Za-z0-9_-]{2,49}$/;

/** The stored form of a coupon code: upper case, so codes match whatever case a client types. */
export const canonicalCouponCode = (code: string) => code.trim().toUpperCase();

/** A code for a coupon created without one: 10 symbols (50 bits). */
export const generateCouponCode = () => randomCode(10);

// ---- gift cards ----------------------------------------------------------------------

/** Symbols in a gift-card code: 16, or 80 random bits, far beyond guessing at any request rate. */
export const GIFT_CARD_CODE_LENGTH = 16;
const GIFT_CARD_SYMBOLS = new RegExp(`^[${ALPHABET}]{${GIFT_CARD_CODE_LENGTH}}$`);

/** A new gift-card code, normalised (16 symbols, no dashes). */
export const generateGiftCardCode = () => randomCode(GIFT_CARD_CODE_LENGTH);

/**
 * What a person typed as a gift-card code, normalised: upper case, spaces and
 * dashes dropped, O read as 0 and I, L as 1; null when it cannot be a code.
 */
export function normaliseGiftCardCode(input: string): string | null {
  const code = input.toUpperCase().replace(/[\s-]/g, '').replace(/O/g, '0').replace(/[IL]/g, '1');
  return GIFT_CARD_SYMBOLS.test(code) ? code : null;
}

/** A normalised code as shown: groups of four (XXXX-XXXX-XXXX-XXXX). */
export const formatGiftCardCode = (code: string) => code.match(/.{1,4}/g)!.join('-');

/** A code shown without its secret part: only its last four symbols (****-****-****-WXYZ). */
export const maskGiftCardCode = (last4: string) => `****-****-****-${last4}`;

/** The stored form of a normalised code: HMAC-SHA256 under a key derived for the purpose (hex). */
export const giftCardCodeHash = (key: Buffer, code: string) => createHmac('sha256', key).update(code).digest('hex');

/** The purpose the gift-card code key is derived for (CoreServices.deriveKey). */
export const GIFT_CARD_KEY_PURPOSE = 'gift-card-code';
