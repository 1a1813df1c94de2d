import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { STEP_UP_TOKEN_TTL_SECONDS } from './token-service.ts';
import {
  bearer, countRows, createLoggedInUser, enableMfa as enableMfaFor, forgetSpentTotpStep, login, query, refreshCookieLine, RELAXED_LIMITS, resetRateLimit, totpCode,
  type TestAccount,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

const post = (account: TestAccount, path: string, json?: unknown, headers: Record<string, string> = {}) =>
  cp.request('POST', path, { headers: bearer(account.accessToken, headers), json });
const loginWith = (account: TestAccount, extra: Record<string, unknown> = {}) =>
  cp.request('POST', '/v1/auth/login', { json: { email: account.email, password: account.password, ...extra } });

const enableMfa = (account: TestAccount) => enableMfaFor(cp, account);

t.test('POST /v1/me/auth/mfa/setup returns a secret and otpauth URI; MFA stays off until confirmed', async (t) => {
  const a = await createLoggedInUser(cp);
  const res = await post(a, '/v1/me/auth/mfa/setup');
  t.equal(res.status, 200);
  const { secret, otpauth_uri } = res.body.data;
  t.match(secret, /^[A-Z2-7]{32}$/, 'Base32, 160 bits');
  const uri = new URL(otpauth_uri);
  t.equal(uri.protocol, 'otpauth:');
  t.equal(uri.host, 'totp');
  t.equal(uri.searchParams.get('secret'), secret);
  t.ok(uri.searchParams.get('issuer'));
  t.ok(decodeURIComponent(uri.pathname).includes(a.email), 'labelled with the account');
  const me = await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) });
  t.equal(me.body.data.mfa_enabled, false);
  t.equal((await loginWith(a)).status, 200, 'login needs no code yet');
});

t.test('POST /v1/me/auth/mfa/verify confirms setup: MFA on, step-up token, recovery codes stored hashed and shown once', async (t) => {
  const a = await createLoggedInUser(cp);
  const setup = await post(a, '/v1/me/auth/mfa/setup');
  const wrong = await post(a, '/v1/me/auth/mfa/verify', { totp_code: (Number(await totpCode(setup.body.data.secret)) + 1).toString().padStart(6, '0').slice(-6) });
  t.equal(wrong.status, 400);
  t.equal(wrong.body.code, 'VALIDATION_ERROR');
  t.same(wrong.body.errors.map((e: { field: string }) => e.field), ['totp_code']);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).body.data.mfa_enabled, false, 'a wrong code enables nothing');

  const res = await post(a, '/v1/me/auth/mfa/verify', { totp_code: await totpCode(setup.body.data.secret) });
  t.equal(res.status, 200);
  t.match(res.body, { step_up_token: String, expires_in: 300, recovery_codes: { codes: Array, generated_at: String } });
  const codes: string[] = res.body.recovery_codes.codes;
  t.ok(codes.length >= 8, `${codes.length} codes`);
  t.equal(new Set(codes).size, codes.length, 'distinct');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).body.data.mfa_enabled, true);
  const stored = await query<{ code_hash: string }>(cp, 'select code_hash from auth_recovery_code where user_id = ?', [a.id]);
  t.equal(stored.length, codes.length);
  for (const code of codes) {
    const bare = code.replace(/-/g, '');
    t.notOk(stored.some((row) => row.code_hash.includes(code) || row.code_hash.includes(bare)), 'stored hashed');
  }
  t.equal((await post(a, '/v1/me/auth/mfa/setup')).status, 409, 'a second setup while enabled is a conflict');
});

t.test('login with MFA needs a TOTP or recovery code; a recovery code works once', async (t) => {
  const a = await createLoggedInUser(cp);
  const { secret, codes } = await enableMfa(a);
  const sessions = await countRows(cp, 'auth_session', 'user_id = ?', [a.id]);
  const bare = await loginWith(a);
  t.equal(bare.status, 401);
  t.equal(bare.body.code, 'MFA_REQUIRED');
  t.equal(refreshCookieLine(bare), undefined);
  const wrongTotp = await loginWith(a, { totp_code: '000000' === (await totpCode(secret)) ? '111111' : '000000' });
  t.equal(wrongTotp.status, 401);
  t.equal(wrongTotp.body.code, 'UNAUTHORIZED');
  const wrongRecovery = await loginWith(a, { recovery_code: 'AAAA-BBBB-CCCC' });
  t.equal(wrongRecovery.status, 401);
  const wrongPassword = await loginWith(a, { password: 'Wrong-Password-1', totp_code: await totpCode(secret) });
  t.equal(wrongPassword.status, 401, 'a good code does not excuse a bad password');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [a.id]), sessions, 'no session for refused logins');

  // One code, sent twice: the replay is refused because its step is spent, wherever in the
  // 30-second window this runs (the code stays inside the ±1-step window for at least 30 s).
  const code = await totpCode(secret);
  const withTotp = await loginWith(a, { totp_code: code });
  t.equal(withTotp.status, 200);
  const replay = await loginWith(a, { totp_code: code });
  t.equal(replay.status, 401, 'the same TOTP step is accepted once');

  const withRecovery = await loginWith(a, { recovery_code: codes[0] });
  t.equal(withRecovery.status, 200);
  t.equal((await loginWith(a, { recovery_code: codes[0] })).status, 401, 'a recovery code is spent after one use');
  t.equal((await loginWith(a, { recovery_code: codes[1] })).status, 200, 'the others still work');
});

t.test('GET /v1/me/auth/mfa/recovery-codes needs a step-up token and lists masked codes', async (t) => {
  const a = await createLoggedInUser(cp);
  const { secret, codes, stepUp } = await enableMfa(a);
  const get = (headers: Record<string, string>) => cp.request('GET', '/v1/me/auth/mfa/recovery-codes', { headers: bearer(a.accessToken, headers) });
  const without = await get({});
  t.equal(without.status, 403);
  t.equal(without.body.code, 'STEP_UP_REQUIRED');
  for (const bad of ['garbage', a.accessToken]) {
    const res = await get({ 'x-step-up-token': bad });
    t.equal(res.status, 403, 'an access token or garbage is not a step-up token');
    t.equal(res.body.code, 'STEP_UP_REQUIRED');
  }
  const b = await createLoggedInUser(cp);
  const foreign = await cp.request('GET', '/v1/me/auth/mfa/recovery-codes', { headers: bearer(b.accessToken, { 'x-step-up-token': stepUp }) });
  t.equal(foreign.status, 403, 'another account\'s step-up token is refused');

  const res = await get({ 'x-step-up-token': stepUp });
  t.equal(res.status, 200);
  t.match(res.body, { codes: Array, generated_at: String, remaining: codes.length });
  for (const masked of res.body.codes as string[]) {
    t.notOk(codes.includes(masked), 'not plaintext');
    t.match(masked, /\*/);
  }
  await loginWith(a, { recovery_code: codes[0] });
  t.equal((await get({ 'x-step-up-token': stepUp })).body.remaining, codes.length - 1, 'spent codes drop out');

  // A fresh step-up token from the verify operation also works.
  const again = await post(a, '/v1/me/auth/mfa/verify', { totp_code: await totpCode(secret) });
  t.equal(again.status, 200);
  t.notOk('recovery_codes' in again.body, 'codes are shown only at generation');
  t.equal((await get({ 'x-step-up-token': again.body.step_up_token })).status, 200);
});

t.test('POST /v1/me/auth/mfa/recovery-codes/regenerate replaces every earlier code', async (t) => {
  const a = await createLoggedInUser(cp);
  const { secret, codes } = await enableMfa(a);
  const wrong = await post(a, '/v1/me/auth/mfa/recovery-codes/regenerate', { totp_code: '000000' === (await totpCode(secret)) ? '111111' : '000000' });
  t.equal(wrong.status, 400);
  t.same(wrong.body.errors.map((e: { field: string }) => e.field), ['totp_code']);
  const res = await post(a, '/v1/me/auth/mfa/recovery-codes/regenerate', { totp_code: await totpCode(secret) });
  t.equal(res.status, 200);
  t.match(res.body, { codes: Array, generated_at: String });
  const fresh: string[] = res.body.codes;
  t.notOk(fresh.some((c) => codes.includes(c)), 'new codes');
  t.equal((await loginWith(a, { recovery_code: codes[2] })).status, 401, 'an old code stops working');
  t.equal((await loginWith(a, { recovery_code: fresh[0] })).status, 200, 'a new code works');
});

t.test('POST /v1/me/auth/mfa/disable needs a valid code, turns MFA off and revokes every session', async (t) => {
  const a = await createLoggedInUser(cp);
  const { secret } = await enableMfa(a);
  const other = await login(cp, a.email, a.password, { totp_code: await totpCode(secret) });
  const wrong = await post(a, '/v1/me/auth/mfa/disable', { totp_code: '000000' === (await totpCode(secret, 1)) ? '111111' : '000000' });
  t.equal(wrong.status, 400);
  t.same(wrong.body.errors.map((e: { field: string }) => e.field), ['totp_code']);
  const res = await post(a, '/v1/me/auth/mfa/disable', { totp_code: await totpCode(secret, 1) });
  t.equal(res.status, 200);
  t.same(res.body, { data: { mfa_enabled: false } });
  for (const token of [a.accessToken, other.accessToken]) {
    t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(token) })).status, 401, 'sessions revoked');
  }
  t.equal(await countRows(cp, 'auth_recovery_code', 'user_id = ?', [a.id]), 0, 'recovery codes removed');
  const plain = await loginWith(a);
  t.equal(plain.status, 200, 'login without a code again');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(plain.body.data.access_token) })).body.data.mfa_enabled, false);
  const twice = await cp.request('POST', '/v1/me/auth/mfa/disable', { headers: bearer(plain.body.data.access_token), json: { totp_code: '123456' } });
  t.equal(twice.status, 409, 'disabling when off is a conflict');
});

t.test('MFA operations without MFA set up answer 409', async (t) => {
  const a = await createLoggedInUser(cp);
  t.equal((await post(a, '/v1/me/auth/mfa/verify', { totp_code: '123456' })).status, 409);
  t.equal((await post(a, '/v1/me/auth/mfa/recovery-codes/regenerate', { totp_code: '123456' })).status, 409);
});

const badCodes: [string, unknown][] = [
  ['a missing totp_code', {}],
  ['letters', { totp_code: 'abcdef' }],
  ['5 digits', { totp_code: '12345' }],
  ['9 digits', { totp_code: '123456789' }],
  ['a number instead of a string', { totp_code: 123456 }],
];
for (const path of ['/v1/me/auth/mfa/verify', '/v1/me/auth/mfa/disable', '/v1/me/auth/mfa/recovery-codes/regenerate']) {
  t.test(`POST ${path} refuses a bad TOTP format with 400 naming totp_code, changing nothing`, async (t) => {
    // A fresh account per operation: the TOTP budget is 5 attempts per 5 minutes per account.
    const a = await createLoggedInUser(cp);
    const { secret } = await enableMfa(a);
    await resetRateLimit(cp, `totp:account:user:${a.id}`); // the set-up spent one attempt
    const codesBefore = await query(cp, 'select code_hash from auth_recovery_code where user_id = ? order by code_hash', [a.id]);
    for (const [what, body] of badCodes) {
      const res = await post(a, path, body);
      t.equal(res.status, 400, what);
      t.equal(res.body.code, 'VALIDATION_ERROR');
      t.same(res.body.errors.map((e: { field: string }) => e.field), ['totp_code'], what);
    }
    t.same(await query(cp, 'select code_hash from auth_recovery_code where user_id = ? order by code_hash', [a.id]), codesBefore, 'recovery codes unchanged');
    t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).body.data.mfa_enabled, true, 'MFA still on');
    await forgetSpentTotpStep(cp, a.id);
    t.equal((await post(a, path, { totp_code: await totpCode(secret) })).status, 429, 'the bad attempts counted against the TOTP budget');
  });
}

// Regression tests of issue 12: a step-up token was not tied to the session that obtained it, and its expiry was untested.
t.test('a step-up token works only in the session that obtained it (403 STEP_UP_REQUIRED in another session of the same account)', async (t) => {
  const a = await createLoggedInUser(cp);
  const { secret, stepUp } = await enableMfa(a);
  const otherSession = await login(cp, a.email, a.password, { totp_code: await totpCode(secret) });
  const read = (accessToken: string) => cp.request('GET', '/v1/me/auth/mfa/recovery-codes', { headers: bearer(accessToken, { 'x-step-up-token': stepUp }) });
  const elsewhere = await read(otherSession.accessToken);
  t.equal(elsewhere.status, 403, 'another session of the same account');
  t.equal(elsewhere.body.code, 'STEP_UP_REQUIRED');
  t.equal((await read(a.accessToken)).status, 200, 'the session that obtained it');
  await cp.request('POST', '/v1/auth/logout', { headers: bearer(a.accessToken) });
  const relogged = await login(cp, a.email, a.password, { totp_code: await totpCode(secret, 1) });
  t.equal((await read(relogged.accessToken)).status, 403, 'nor a later session once that one ended');
});

t.test('a step-up token expires 300 s after issue (clock moved, not waited for)', async (t) => {
  let offsetMs = 0;
  const clocked = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock: { now: () => new Date(Date.now() + offsetMs) } });
  const a = await createLoggedInUser(clocked);
  const { stepUp } = await enableMfaFor(clocked, a);
  const read = () => clocked.request('GET', '/v1/me/auth/mfa/recovery-codes', { headers: bearer(a.accessToken, { 'x-step-up-token': stepUp }) });
  offsetMs = (STEP_UP_TOKEN_TTL_SECONDS - 10) * 1000;
  t.equal((await read()).status, 200, 'valid shortly before its expiry');
  // Past exp and the 5 s clock tolerance; the 15-minute access token is still valid.
  offsetMs = (STEP_UP_TOKEN_TTL_SECONDS + 6) * 1000;
  const expired = await read();
  t.equal(expired.status, 403, 'refused after expiry');
  t.equal(expired.body.code, 'STEP_UP_REQUIRED');
  t.equal((await clocked.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200, 'while the access token still works');
});
