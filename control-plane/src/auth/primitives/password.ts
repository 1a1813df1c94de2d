// Password policy (auth-api.md: 10..128 chars with upper, lower, digit and
// special character) and argon2id hashing.
import argon2 from 'argon2';
import { z } from 'zod';

export const PASSWORD_MIN_LENGTH = 10;
export const PASSWORD_MAX_LENGTH = 128;

// Lengths are counted in Unicode code points, not UTF-16 units, so an emoji
// counts as one character, as a user would count it.
const codePoints = (value: string): number => [...value].length;

const policy = z
  .string({ error: 'Password must be a string' })
  .refine((v) => codePoints(v) >= PASSWORD_MIN_LENGTH, {
    message: `Password must be at least ${PASSWORD_MIN_LENGTH} characters long`,
  })
  .refine((v) => codePoints(v) <= PASSWORD_MAX_LENGTH, {
    message: `Password must be at most ${PASSWORD_MAX_LENGTH} characters long`,
    abort: true,
  })
  .refine((v) => /\p{Lu}/u.test(v), { message: 'Password must contain at least one uppercase letter' })
  .refine((v) => /\p{Ll}/u.test(v), { message: 'Password must contain at least one lowercase letter' })
  .refine((v) => /\p{Nd}/u.test(v), { message: 'Password must contain at least one digit' })
  // Anything that is neither a letter nor a number (punctuation, symbols, space).
  .refine((v) => /[^\p{L}\p{N}]/u.test(v), {
    message: 'Password must contain at least one special character',
  })
  // Control characters (NUL, escape, ...) are never typed on purpose and break some clients.
  .refine((v) => !/\p{Cc}/u.test(v), { message: 'Password must not contain control characters' });

const describe = (description: string) => ({
  description,
  minLength: PASSWORD_MIN_LENGTH,
  maxLength: PASSWORD_MAX_LENGTH,
  format: 'password',
});

/** Password chosen at registration. */
export const passwordSchema = policy.meta(
  describe('10..128 characters with at least one uppercase letter, lowercase letter, digit and special character'),
);

/** New password at change or reset: the same policy as registration. */
export const newPasswordSchema = policy.meta(
  describe('New password: 10..128 characters with at least one uppercase letter, lowercase letter, digit and special character'),
);

/**
 * Password presented at login. Not checked against the policy (a password set
 * under an older policy must still log in), only bounded so a huge body cannot
 * be fed to the hash.
 */
export const loginPasswordSchema = z
  .string({ error: 'Password is required' })
  .min(1, { message: 'Password is required' })
  .max(1024, { message: 'Password is too long' });

export type Argon2Params = {
  /** Memory in KiB. */
  memoryCost: number;
  timeCost: number;
  parallelism: number;
};

/**
 * RFC 9106 §4 second recommended option: argon2id, m = 64 MiB, t = 3, p = 4,
 * 128-bit salt, 256-bit tag. That is 3.4x the memory of the OWASP minimum
 * (19 MiB, t = 2, p = 1) and costs about 135 ms per hash on the 2-core dev
 * machine: acceptable for login/register/reset, which are rate limited and
 * never on the per-request path (requests carry JWTs).
 */
export const PASSWORD_HASH_PARAMS: Readonly<Argon2Params> = Object.freeze({
  memoryCost: 65536,
  timeCost: 3,
  parallelism: 4,
});

/** OWASP's floor for argon2id; anything weaker is refused by hashPassword. */
export const OWASP_MINIMUM_PARAMS: Readonly<Argon2Params> = Object.freeze({
  memoryCost: 19456,
  timeCost: 2,
  parallelism: 1,
});

// Salt: the library always draws 16 random bytes (128 bits).
const HASH_LENGTH = 32;

// NFC so that the same password typed on different keyboards/OSes
// (precomposed vs combining accents) hashes the same way.
const normalize = (password: string): string => password.normalize('NFC');

function assertStrongEnough(params: Argon2Params): void {
  if (
    params.memoryCost < OWASP_MINIMUM_PARAMS.memoryCost ||
    params.timeCost < 1 ||
    params.parallelism < 1 ||
    params.memoryCost * params.timeCost < OWASP_MINIMUM_PARAMS.memoryCost * OWASP_MINIMUM_PARAMS.timeCost
  ) {
    throw new Error('argon2 parameters are below the OWASP minimum');
  }
}

/** argon2id hash in PHC string format ($argon2id$v=19$m=...,t=...,p=...$salt$hash). Runs on the libuv pool. */
export async function hashPassword(password: string, params: Argon2Params = PASSWORD_HASH_PARAMS): Promise<string> {
  assertStrongEnough(params);
  return argon2.hash(normalize(password), {
    type: argon2.argon2id,
    memoryCost: params.memoryCost,
    timeCost: params.timeCost,
    parallelism: params.parallelism,
    hashLength: HASH_LENGTH,
  });
}

/** True when `password` matches `hash`. A malformed or non-argon2 hash is a mismatch, never an exception. */
export async function verifyPassword(hash: string, password: string): Promise<boolean> {
  if (!hash.startsWith('$argon2')) return false;
  try {
    return await argon2.verify(hash, normalize(password));
  } catch {
    return false;
  }
}

/** True when the stored hash was made with other parameters (or another variant) and should be replaced after a successful login. */
export function needsRehash(hash: string, params: Argon2Params = PASSWORD_HASH_PARAMS): boolean {
  if (!hash.startsWith('$argon2id$')) return true;
  try {
    return argon2.needsRehash(hash, {
      memoryCost: params.memoryCost,
      timeCost: params.timeCost,
      parallelism: params.parallelism,
    });
  } catch {
    return true;
  }
}

let dummyHash: Promise<string> | undefined;

/**
 * A hash of a random password with the current parameters, made once. Login
 * for an unknown e-mail verifies against it so it takes as long as a real
 * login and the response time does not reveal which addresses exist.
 */
function getDummyHash(): Promise<string> {
  dummyHash ??= hashPassword(crypto.randomUUID() + 'Aa1!');
  return dummyHash;
}

/** Spend the time of one real verification; always false. */
export async function dummyVerify(password: string): Promise<false> {
  await verifyPassword(await getDummyHash(), password);
  return false;
}

/**
 * Verify against the stored hash, or against the dummy hash when there is no
 * user (or the user has no password), so both paths cost the same.
 */
export async function verifyPasswordOrDummy(hash: string | null | undefined, password: string): Promise<boolean> {
  if (hash == null || hash === '') return dummyVerify(password);
  return verifyPassword(hash, password);
}

/** Make the dummy hash ahead of the first login (call at start-up). */
export async function warmUpPasswordHashing(): Promise<void> {
  await getDummyHash();
}
