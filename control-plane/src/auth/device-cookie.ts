// Device cookies (OWASP "Slow down online guessing attacks with device
// cookies"): a successful login leaves a signed cookie on the client that
// names the account it logged in to. Later logins to that account carrying
// it are counted against a budget of that device rather than the account's,
// so wrong passwords sent by others (who cannot have the cookie) lock out only
// clients the account has never been used from, not its owner. Wrong passwords
// sent with the cookie still count, and lock out that cookie.
//
// Value: `<expiry, unix s, base 36>.<nonce>.<signature>`, the signature an
// HMAC-SHA256 over the version, the login name (normalised e-mail), expiry and
// nonce, under a key derived from the secrets key. Nothing is stored server
// side: the nonce names the device's budget in the rate-limit store.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';
import { deriveKey } from '../crypto/secret-box.ts';
import type { CoreServices as AppServices } from '../core/services.ts';
import { readCookie, secureCookies } from './cookies.ts';

export const DEVICE_COOKIE = 'device_cookie';
const PATH = '/v1/auth';
/** A device stays trusted 180 days after its last successful login (each login renews the cookie). */
export const DEVICE_COOKIE_LIFETIME_SECONDS = 180 * 24 * 60 * 60;
const VERSION = 'v1';
const VALUE = /^([0-9a-z]{1,10})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

// One derived key per token pepper (itself derived from SECRETS_KEY), made on first use.
const keys = new WeakMap<Buffer, Buffer>();
function keyOf(app: Pick<AppServices, 'tokenPepper'>): Buffer {
  let key = keys.get(app.tokenPepper);
  if (!key) {
    key = deriveKey(app.tokenPepper, 'device-cookie');
    keys.set(app.tokenPepper, key);
  }
  return key;
}

function sign(key: Buffer, login: string, expiry: string, nonce: string): Buffer {
  return createHmac('sha256', key).update(`${VERSION}\n${login}\n${expiry}\n${nonce}`).digest();
}

/** A new device cookie value for this login name (a normalised e-mail). */
export function issueDeviceCookie(app: Pick<AppServices, 'tokenPepper'>, login: string, now = Date.now()): string {
  const expiry = Math.floor(now / 1000 + DEVICE_COOKIE_LIFETIME_SECONDS).toString(36);
  const nonce = randomBytes(16).toString('base64url');
  return `${expiry}.${nonce}.${sign(keyOf(app), login, expiry, nonce).toString('base64url')}`;
}

/**
 * The device's nonce when `value` is a genuine, unexpired device cookie for
 * this login name; undefined otherwise (absent, tampered, expired, or issued
 * for another account).
 */
export function verifyDeviceCookie(app: Pick<AppServices, 'tokenPepper'>, value: string | undefined, login: string, now = Date.now()): string | undefined {
  const match = value ? VALUE.exec(value) : null;
  if (!match) return undefined;
  const [, expiry, nonce, signature] = match as unknown as [string, string, string, string];
  if (parseInt(expiry, 36) * 1000 <= now) return undefined;
  const expected = sign(keyOf(app), login, expiry, nonce);
  const given = Buffer.from(signature, 'base64url');
  return given.length === expected.length && timingSafeEqual(given, expected) ? nonce : undefined;
}

/** The nonce of the request's device cookie if it is valid for this login name. */
export function trustedDevice(app: Pick<AppServices, 'tokenPepper'>, ctx: Context, login: string): string | undefined {
  return verifyDeviceCookie(app, readCookie(ctx, DEVICE_COOKIE), login);
}

export function setDeviceCookie(ctx: Context, app: Pick<AppServices, 'tokenPepper' | 'config'>, login: string): void {
  const attributes = [`${DEVICE_COOKIE}=${issueDeviceCookie(app, login)}`, `Path=${PATH}`, `Max-Age=${DEVICE_COOKIE_LIFETIME_SECONDS}`, 'HttpOnly', 'SameSite=Strict'];
  if (secureCookies(app.config)) attributes.push('Secure');
  ctx.append('set-cookie', attributes.join('; '));
}
