// Regression tests of the targeted lockout (issue 9): nine wrong passwords
// sent from nine addresses locked the real owner out for 15 minutes. The
// per-account limit stays against guessing, but a client that has logged in
// to the account before (its signed device cookie) spends its own budget.
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  cookieAttributes, countRows, createUserDirect, deviceCookieFrom, deviceCookieHeader, deviceCookieLine,
} from '../../../test/support/auth.ts';
import type { TestResponse } from '../../../test/support/control-plane.ts';

// Real limits (multiplier 1); each request speaks from its own address through X-Forwarded-For.
const cp = await startTestControlPlane(t, { env: { RATE_LIMIT_IP_MULTIPLIER: '1', RATE_LIMIT_PER_MINUTE: '0', TRUST_PROXY: 'true' } });
let octet = 0;
const newIp = () => ({ 'x-forwarded-for': `203.0.113.${++octet % 250}` });
const WRONG = 'Wrong-Password-1';
const ACCOUNT_LIMIT = 10;
const DEVICE_LIMIT = 10;

const login = (email: string, password: string, headers: Record<string, string> = {}) =>
  cp.request('POST', '/v1/auth/login', { json: { email, password }, headers: { ...newIp(), ...headers } });

function assertLimited(t: Pick<typeof import('tap').t, 'equal' | 'ok'>, res: TestResponse, what: string) {
  t.equal(res.status, 429, what);
  t.equal(res.body?.code, 'RATE_LIMITED', what);
  t.ok(Number(res.headers.get('retry-after')) >= 1, `${what}: Retry-After`);
}

/** An account whose owner logged in once from their device: returns the device cookie it got. */
async function ownerWithDevice() {
  const user = await createUserDirect(cp);
  const first = await login(user.email, user.password);
  t.equal(first.status, 200);
  const device = deviceCookieFrom(first);
  if (!device) throw new Error('no device cookie set at login');
  return { user, device };
}

/** The attack of the issue: wrong passwords from as many addresses until the account budget is spent (the owner's first login spent one unit). */
async function lockOutAccount(t: Pick<typeof import('tap').t, 'equal'>, email: string) {
  for (let i = 0; i < ACCOUNT_LIMIT - 1; i++) t.equal((await login(email, WRONG)).status, 401, `attacker guess ${i + 1}`);
}

t.test('POST /v1/auth/login sets a signed device cookie: HttpOnly, SameSite=Strict, Path=/v1/auth, long-lived', async (t) => {
  const user = await createUserDirect(cp);
  const res = await login(user.email, user.password);
  t.equal(res.status, 200);
  const line = deviceCookieLine(res)!;
  t.ok(line, 'device cookie set');
  const attributes = cookieAttributes(line);
  t.ok(attributes.has('httponly'), 'HttpOnly');
  t.equal(attributes.get('samesite'), 'Strict');
  t.equal(attributes.get('path'), '/v1/auth');
  t.ok(Number(attributes.get('max-age')) >= 90 * 24 * 3600, `long-lived: Max-Age ${attributes.get('max-age')}`);
  t.notOk(line.includes(user.email), 'the cookie does not carry the address');
  const failed = await login(user.email, WRONG);
  t.equal(deviceCookieLine(failed), undefined, 'no device cookie for a failed login');
});

t.test('targeted lockout: after others spend the account budget, the owner with the device cookie still logs in; a client without it gets 429', async (t) => {
  const { user, device } = await ownerWithDevice();
  await lockOutAccount(t, user.email);
  assertLimited(t, await login(user.email, user.password), 'a fresh client with the right password is locked out');
  const sessions = await countRows(cp, 'auth_session', 'user_id = ?', [user.id]);
  const owner = await login(user.email, user.password, deviceCookieHeader(device));
  t.equal(owner.status, 200, 'the owner logs in from a device the account was used on');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [user.id]), sessions + 1, 'a session is started');
  t.ok(deviceCookieFrom(owner), 'and the device cookie is renewed');
  assertLimited(t, await login(user.email, user.password), 'untrusted clients stay locked out');
});

t.test('targeted lockout: wrong passwords sent with the device cookie count against that device, which is then locked out itself', async (t) => {
  const { user, device } = await ownerWithDevice();
  for (let i = 0; i < DEVICE_LIMIT; i++) {
    t.equal((await login(user.email, WRONG, deviceCookieHeader(device))).status, 401, `guess ${i + 1} with the cookie`);
  }
  t.equal((await login(user.email, user.password)).status, 200, 'the account budget was not touched: a client without the cookie still logs in');
  assertLimited(t, await login(user.email, user.password, deviceCookieHeader(device)), 'the device budget is spent, even for the right password');
});

t.test('targeted lockout: only a genuine cookie of this account counts as a trusted device', async (t) => {
  const { user, device } = await ownerWithDevice();
  const other = await ownerWithDevice();
  await lockOutAccount(t, user.email);
  const [expiry, nonce, signature] = device.split('.') as [string, string, string];
  const flip = (s: string) => (s[0] === 'A' ? 'B' : 'A') + s.slice(1);
  const forged: [string, string][] = [
    ['another account\'s cookie', other.device],
    ['a tampered signature', `${expiry}.${nonce}.${flip(signature)}`],
    ['a changed nonce', `${expiry}.${flip(nonce)}.${signature}`],
    ['a later expiry', `${(parseInt(expiry, 36) + 1000).toString(36)}.${nonce}.${signature}`],
    ['garbage', 'not-a-device-cookie'],
  ];
  for (const [what, value] of forged) assertLimited(t, await login(user.email, user.password, deviceCookieHeader(value)), what);
  t.equal((await login(user.email, user.password, deviceCookieHeader(device))).status, 200, 'the genuine cookie works');
  t.equal((await login(other.user.email, other.user.password, deviceCookieHeader(other.device))).status, 200, 'the other account is not affected');
});
