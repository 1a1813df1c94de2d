// High-entropy opaque tokens, stored only as peppered HMAC-SHA256 hashes.
import { createHash, createHmac, createSecretKey, randomBytes, timingSafeEqual } from 'node:crypto';

/** 32 random bytes (256 bits) as base64url (43 chars): unguessable, URL- and cookie-safe. */
export function generateOpaqueToken(bytes = 32): string {
  if (!Number.isInteger(bytes) || bytes < 16) throw new RangeError('opaque tokens need at least 16 random bytes');
  return randomBytes(bytes).toString('base64url');
}

export const generateRefreshToken = (): string => generateOpaqueToken();
export const generateEmailVerificationToken = (): string => generateOpaqueToken();
export const generatePasswordResetToken = (): string => generateOpaqueToken();

export const API_TOKEN_PREFIX = 'cdn_';
/** Edge agent tokens (the control channel's credential, edge/agent-token-service.ts). */
export const AGENT_TOKEN_PREFIX = 'agt_';
const TOKEN_PREFIXES = [API_TOKEN_PREFIX, AGENT_TOKEN_PREFIX] as const;
const API_TOKEN_RE = /^cdn_[A-Za-z0-9_-]{43}$/;
const AGENT_TOKEN_RE = /^agt_[A-Za-z0-9_-]{43}$/;

/**
 * CDN API token: `cdn_` + 32 random bytes base64url. The prefix tells a
 * Bearer API token from a JWT at a glance and lets secret scanners spot leaks.
 */
export function generateApiToken(): string {
  return API_TOKEN_PREFIX + generateOpaqueToken(32);
}

export function isApiTokenFormat(value: string): boolean {
  return API_TOKEN_RE.test(value);
}

/** Edge agent token: `agt_` + 32 random bytes base64url (its own prefix: never mistaken for an API token). */
export function generateAgentToken(): string {
  return AGENT_TOKEN_PREFIX + generateOpaqueToken(32);
}

export function isAgentTokenFormat(value: string): boolean {
  return AGENT_TOKEN_RE.test(value);
}

/** Safe to log or show in a token list: prefix and first 4 characters of the secret part. */
export function redactToken(token: string): string {
  const prefix = TOKEN_PREFIXES.find((p) => token.startsWith(p)) ?? '';
  return `${prefix}${token.slice(prefix.length, prefix.length + 4)}…`;
}

function pepperBytes(pepper: string | Uint8Array): Buffer {
  const bytes =
    typeof pepper === 'string'
      ? /^(?:[0-9a-fA-F]{2})+$/.test(pepper)
        ? Buffer.from(pepper, 'hex')
        : Buffer.alloc(0)
      : Buffer.from(pepper);
  // A short pepper would make the stored hashes guessable offline from a DB dump.
  if (bytes.length < 32) throw new RangeError('token pepper must be at least 32 bytes (64 hex characters)');
  return bytes;
}

/**
 * HMAC-SHA256(pepper, token) as hex: what the database stores and looks up.
 * Without the pepper, a stolen table gives no way to test token guesses.
 */
export function hashToken(token: string, pepper: string | Uint8Array): string {
  return createHmac('sha256', pepperBytes(pepper)).update(token, 'utf8').digest('hex');
}

export type TokenHasher = {
  hash(token: string): string;
  /** Constant-time check of a presented token against a stored hash. */
  matches(token: string, storedHash: string): boolean;
};

/** Binds the pepper once (validated up front) so callers pass tokens only. */
export function createTokenHasher(pepper: string | Uint8Array): TokenHasher {
  const key = createSecretKey(pepperBytes(pepper));
  const hash = (token: string) => createHmac('sha256', key).update(token, 'utf8').digest('hex');
  return { hash, matches: (token, storedHash) => safeEqual(hash(token), storedHash) };
}

/**
 * Constant-time equality for strings or bytes of any length: both sides are
 * hashed to 32 bytes first, so neither content nor length leaks through timing.
 */
export function safeEqual(a: string | Uint8Array, b: string | Uint8Array): boolean {
  const da = createHash('sha256').update(a).digest();
  const db = createHash('sha256').update(b).digest();
  return timingSafeEqual(da, db);
}

// Recovery codes: Crockford base32 alphabet, lower case (no i, l, o, u to misread).
const RECOVERY_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
const RECOVERY_CODE_CHARS = 10; // 50 bits; single use, hashed, and login is rate limited
export const RECOVERY_CODE_COUNT = 10;

/** One code like `7kq2-m9xd-4h`. */
export function generateRecoveryCode(): string {
  // 32 symbols: the low 5 bits of a random byte are uniform, so no modulo bias.
  const chars = [...randomBytes(RECOVERY_CODE_CHARS)].map((b) => RECOVERY_ALPHABET[b & 31]).join('');
  return `${chars.slice(0, 4)}-${chars.slice(4, 8)}-${chars.slice(8)}`;
}

export function generateRecoveryCodes(count = RECOVERY_CODE_COUNT): string[] {
  const codes = new Set<string>();
  while (codes.size < count) codes.add(generateRecoveryCode());
  return [...codes];
}

/**
 * Canonical form of a typed code: case, spaces and dashes ignored, and the
 * look-alikes Crockford maps (i/l -> 1, o -> 0). Null when it cannot be a code.
 */
export function normalizeRecoveryCode(input: string): string | null {
  const compact = input
    .toLowerCase()
    .replace(/[\s-]/g, '')
    .replace(/[il]/g, '1')
    .replace(/o/g, '0');
  if (compact.length !== RECOVERY_CODE_CHARS) return null;
  for (const c of compact) if (!RECOVERY_ALPHABET.includes(c)) return null;
  return `${compact.slice(0, 4)}-${compact.slice(4, 8)}-${compact.slice(8)}`;
}

export function hashRecoveryCode(code: string, pepper: string | Uint8Array): string {
  const canonical = normalizeRecoveryCode(code);
  if (canonical === null) throw new RangeError('not a recovery code');
  return hashToken(`recovery:${canonical}`, pepper);
}

/**
 * Index of the stored hash the typed code matches, or -1. Compares against
 * every hash (no early exit) so timing does not reveal the position.
 * The caller deletes or marks that entry used: codes are single use.
 */
export function matchRecoveryCode(input: string, storedHashes: readonly string[], pepper: string | Uint8Array): number {
  const canonical = normalizeRecoveryCode(input);
  // Still hash something so a malformed code costs the same.
  const candidate = hashToken(`recovery:${canonical ?? 'invalid'}`, pepper);
  let found = -1;
  for (const [i, stored] of storedHashes.entries()) {
    if (safeEqual(candidate, stored) && found === -1 && canonical !== null) found = i;
  }
  return found;
}
