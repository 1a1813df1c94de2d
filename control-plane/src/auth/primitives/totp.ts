// TOTP (RFC 6238) on otplib 13's functional API.
import { generateSecret, generateURI, verify } from 'otplib';

export type TotpAlgorithm = 'sha1' | 'sha256' | 'sha512';

export type TotpSettings = {
  /** 6..8; authenticator apps mostly support 6 only. */
  digits?: number;
  algorithm?: TotpAlgorithm;
  /** Seconds per step. */
  period?: number;
};

export const TOTP_DEFAULTS = Object.freeze({ digits: 6, algorithm: 'sha1' as TotpAlgorithm, period: 30 });

/** 20 random bytes (160 bits, RFC 4226 §4 recommendation) as Base32, the format authenticator apps expect. */
export function generateTotpSecret(): string {
  return generateSecret({ length: 20 });
}

function settings(s: TotpSettings = {}): Required<TotpSettings> {
  const digits = s.digits ?? TOTP_DEFAULTS.digits;
  if (!Number.isInteger(digits) || digits < 6 || digits > 8) throw new RangeError('TOTP digits must be 6, 7 or 8');
  const period = s.period ?? TOTP_DEFAULTS.period;
  if (!Number.isInteger(period) || period < 15 || period > 120) throw new RangeError('TOTP period must be 15..120 s');
  return { digits, period, algorithm: s.algorithm ?? TOTP_DEFAULTS.algorithm };
}

/** otpauth://totp/Issuer:account?secret=...&issuer=... for the QR code shown at MFA setup. */
export function otpauthUri(opts: { secret: string; accountName: string; issuer: string } & TotpSettings): string {
  const s = settings(opts);
  return generateURI({
    strategy: 'totp',
    issuer: opts.issuer,
    label: opts.accountName,
    secret: opts.secret,
    digits: s.digits,
    algorithm: s.algorithm,
    period: s.period,
  });
}

export type TotpMatch = {
  /** Counter of the matched step: store it and pass it as afterTimeStep next time to refuse replays. */
  timeStep: number;
  /** Steps between the matched step and now (-1, 0 or +1 with window 1): clock drift of the device. */
  delta: number;
};

export type VerifyTotpOptions = TotpSettings & {
  /** Steps accepted either side of now (default 1: ±30 s, RFC 6238 §5.2's suggestion). */
  window?: number;
  /** Refuse steps <= this one (the last step the user already spent). */
  afterTimeStep?: number;
  /** Unix time in seconds (default now); for tests. */
  now?: number;
};

/**
 * The matched time step, or null when the code is wrong, outside the window,
 * already spent (<= afterTimeStep) or not exactly `digits` digits.
 * `secret` is Base32 (as stored) or raw bytes.
 */
export async function verifyTotp(
  secret: string | Uint8Array,
  code: string,
  opts: VerifyTotpOptions = {},
): Promise<TotpMatch | null> {
  const s = settings(opts);
  // Format check first: otplib throws on malformed tokens, and a wrong length is simply a wrong code.
  if (typeof code !== 'string' || code.length !== s.digits || !/^[0-9]+$/.test(code)) return null;
  const window = opts.window ?? 1;
  if (!Number.isInteger(window) || window < 0 || window > 10) throw new RangeError('TOTP window must be 0..10');
  const now = opts.now ?? Math.floor(Date.now() / 1000);

  let afterTimeStep = opts.afterTimeStep;
  if (afterTimeStep !== undefined) {
    // otplib throws when afterTimeStep lies beyond the window; every step would be refused anyway.
    const lastStepInWindow = Math.floor(now / s.period) + window;
    if (afterTimeStep >= lastStepInWindow) return null;
    afterTimeStep = Math.max(0, Math.floor(afterTimeStep));
  }

  const result = await verify({
    strategy: 'totp',
    secret,
    token: code,
    digits: s.digits,
    algorithm: s.algorithm,
    period: s.period,
    epoch: now,
    epochTolerance: window * s.period,
    afterTimeStep,
  });
  if (!result.valid || !('timeStep' in result)) return null;
  return { timeStep: result.timeStep, delta: result.delta };
}
