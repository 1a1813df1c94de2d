import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieHeader, countRows, createLoggedInUser, createUserDirect, enableMfa, login, messagesTo, OTHER_PASSWORD, query,
  refreshTokenFrom, RELAXED_LIMITS, resetRateLimit, RESET_SUBJECT, tokenFromLatest, totpCode, uniqueEmail,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const forgot = (email: string) => cp.request('POST', '/v1/auth/password/forgot', { json: { email } });
const reset = (token: string, new_password = OTHER_PASSWORD) => cp.request('POST', '/v1/auth/password/reset', { json: { token, new_password } });

t.test('POST /v1/auth/password/forgot answers the same whether or not the address exists', async (t) => {
  const user = await createUserDirect(cp);
  const ghost = uniqueEmail('ghost');
  const known = await forgot(user.email);
  const unknown = await forgot(ghost);
  t.equal(known.status, 200);
  t.equal(unknown.status, 200);
  t.same(known.body, unknown.body);
  t.type(known.body.data.message, 'string');
  const mails = await messagesTo(cp, user.email);
  t.equal(mails.length, 1);
  t.match(mails[0]!.subject, RESET_SUBJECT);
  t.same(await messagesTo(cp, ghost), [], 'nothing sent to an unknown address');
  const [row] = await query<{ minutes: number }>(cp,
    `select round(extract(epoch from (expires_at - created_at)) / 60)::int as minutes from auth_one_time_token where user_id = ? and purpose = 'password_reset'`, [user.id]);
  t.equal(row!.minutes, 15, 'the token is valid 15 minutes');
});

t.test('POST /v1/auth/password/reset sets the password, revokes every session and returns a bare token with a cookie', async (t) => {
  const a = await createLoggedInUser(cp);
  const second = await login(cp, a.email);
  await forgot(a.email);
  const token = await tokenFromLatest(cp, a.email, RESET_SUBJECT);
  const res = await reset(token);
  t.equal(res.status, 200);
  t.same(Object.keys(res.body).sort(), ['access_token', 'expires_in', 'token_type'], 'bare token response');
  t.equal(res.body.token_type, 'Bearer');
  t.ok(refreshTokenFrom(res), 'refresh cookie set');
  for (const old of [a.accessToken, second.accessToken]) {
    t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(old) })).status, 401, 'old access tokens refused at once');
  }
  for (const old of [a.refreshToken, second.refreshToken]) {
    t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(old) })).status, 401, 'old refresh tokens refused');
  }
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(res.body.access_token) })).status, 200, 'the new token works');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ? and revoked_at is null', [a.id]), 1, 'only the new session is live');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: a.password } })).status, 401, 'old password refused');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: OTHER_PASSWORD } })).status, 200, 'new password accepted');
  const again = await reset(token, 'Third-Password-9');
  t.equal(again.status, 400, 'the token works once');
  t.equal(again.body.code, 'VALIDATION_ERROR');
  t.same(again.body.errors.map((e: { field: string }) => e.field), ['token']);
});

t.test('POST /v1/auth/password/reset refuses an expired token', async (t) => {
  const user = await createUserDirect(cp);
  await forgot(user.email);
  const token = await tokenFromLatest(cp, user.email, RESET_SUBJECT);
  await query(cp, `update auth_one_time_token set expires_at = now() - interval '1 second' where user_id = ?`, [user.id]);
  const hashBefore = (await query<{ password_hash: string }>(cp, 'select password_hash from app_user where id = ?', [user.id]))[0]!.password_hash;
  const res = await reset(token);
  t.equal(res.status, 400);
  t.equal(res.body.errors[0].field, 'token');
  t.equal((await query<{ password_hash: string }>(cp, 'select password_hash from app_user where id = ?', [user.id]))[0]!.password_hash, hashBefore, 'password unchanged');
});

t.test('a newer reset link or a login voids the outstanding reset link', async (t) => {
  const user = await createUserDirect(cp);
  await forgot(user.email);
  const older = await tokenFromLatest(cp, user.email, RESET_SUBJECT);
  await forgot(user.email);
  const newer = await tokenFromLatest(cp, user.email, RESET_SUBJECT);
  t.not(newer, older);
  t.equal((await reset(older)).status, 400, 'only the newest link works');
  await login(cp, user.email);
  t.equal((await reset(newer)).status, 400, 'a login invalidates reset links');
});

t.test('POST /v1/auth/password/reset for a suspended account is refused with 403 ACCOUNT_SUSPENDED', async (t) => {
  const user = await createUserDirect(cp);
  await forgot(user.email);
  const token = await tokenFromLatest(cp, user.email, RESET_SUBJECT);
  await query(cp, `update app_user set status = 'suspended' where id = ?`, [user.id]);
  const res = await reset(token);
  t.equal(res.status, 403);
  t.equal(res.body.code, 'ACCOUNT_SUSPENDED');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [user.id]), 0, 'no session started');
});

const badForgot: [string, unknown][] = [
  ['a missing email', {}],
  ['an email of the wrong type', { email: ['a@example.com'] }],
  ['a bad e-mail address', { email: 'example.com' }],
  ['an e-mail over 254 characters', { email: `${'d'.repeat(250)}@example.com` }],
];
for (const [what, body] of badForgot) {
  t.test(`POST /v1/auth/password/forgot refuses ${what} with 400 naming email`, async (t) => {
    const tokens = await countRows(cp, 'auth_one_time_token');
    const res = await cp.request('POST', '/v1/auth/password/forgot', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.same(res.body.errors.map((e: { field: string }) => e.field), ['email']);
    t.equal(await countRows(cp, 'auth_one_time_token'), tokens);
  });
}

t.test('POST /v1/auth/password/reset refuses bad input with 400 naming the field, changing nothing', async (t) => {
  const user = await createUserDirect(cp);
  await forgot(user.email);
  const token = await tokenFromLatest(cp, user.email, RESET_SUBJECT);
  const cases: [string, Record<string, unknown>, string][] = [
    ['missing token', { new_password: OTHER_PASSWORD }, 'token'],
    ['token of the wrong type', { token: 5, new_password: OTHER_PASSWORD }, 'token'],
    ['token over 512 characters', { token: 'a'.repeat(513), new_password: OTHER_PASSWORD }, 'token'],
    ['missing new_password', { token }, 'new_password'],
    ['new_password of the wrong type', { token, new_password: 1234567890123 }, 'new_password'],
    ['new_password under 10 characters', { token, new_password: 'Ab1!xyz' }, 'new_password'],
    ['new_password over 128 characters', { token, new_password: `Ab1!${'z'.repeat(125)}` }, 'new_password'],
    ['new_password without uppercase', { token, new_password: 'no-upper-123' }, 'new_password'],
    ['new_password without lowercase', { token, new_password: 'NO-LOWER-123' }, 'new_password'],
    ['new_password without a digit', { token, new_password: 'No-Digit-Here' }, 'new_password'],
    ['new_password without a special character', { token, new_password: 'NoSpecial1234' }, 'new_password'],
    ['an unknown field', { token, new_password: OTHER_PASSWORD, email: user.email }, 'email'],
  ];
  const sessions = await countRows(cp, 'auth_session');
  for (const [what, body, field] of cases) {
    const res = await cp.request('POST', '/v1/auth/password/reset', { json: body });
    t.equal(res.status, 400, what);
    t.equal(res.body.code, 'VALIDATION_ERROR', what);
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), `${what}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await countRows(cp, 'auth_session'), sessions, 'no session started');
  t.equal(await countRows(cp, 'auth_one_time_token', 'user_id = ? and used_at is null', [user.id]), 1, 'the token is still unspent');
  t.equal((await reset(token)).status, 200, 'and still works');
});

// Regression tests of "password reset skips MFA" (issue 7): with MFA on,
// forgot → reset returned a full session on the mailbox alone.
const passwordHashOf = async (userId: string) =>
  (await query<{ password_hash: string }>(cp, 'select password_hash from app_user where id = ?', [userId]))[0]!.password_hash;
const resetWith = (token: string, extra: Record<string, unknown>) =>
  cp.request('POST', '/v1/auth/password/reset', { json: { token, new_password: OTHER_PASSWORD, ...extra } });

async function mfaAccountWithResetToken() {
  const account = await createLoggedInUser(cp);
  const mfa = await enableMfa(cp, account);
  await resetRateLimit(cp, `totp:account:user:${account.id}`); // enabling spent one TOTP attempt
  await forgot(account.email);
  const token = await tokenFromLatest(cp, account.email, RESET_SUBJECT);
  return { account, token, ...mfa };
}

t.test('password reset skips MFA: without a code an MFA account gets 401 MFA_REQUIRED, no session, the password unchanged and the token still valid', async (t) => {
  const { account, token, secret } = await mfaAccountWithResetToken();
  const hash = await passwordHashOf(account.id);
  const sessions = await countRows(cp, 'auth_session', 'user_id = ?', [account.id]);
  const res = await reset(token);
  t.equal(res.status, 401);
  t.equal(res.body.code, 'MFA_REQUIRED');
  t.equal(refreshTokenFrom(res), undefined, 'no refresh cookie');
  t.notOk('access_token' in res.body, 'no token');
  t.equal(await passwordHashOf(account.id), hash, 'password unchanged');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [account.id]), sessions, 'no session started');
  t.equal(await countRows(cp, 'auth_session', 'user_id = ? and revoked_at is null', [account.id]), sessions, 'no session revoked');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(account.accessToken) })).status, 200, 'the existing session lives on');
  t.equal(await countRows(cp, 'auth_one_time_token', `user_id = ? and purpose = 'password_reset' and used_at is null`, [account.id]), 1, 'the reset token is not spent');
  const retry = await resetWith(token, { totp_code: await totpCode(secret) });
  t.equal(retry.status, 200, 'the same link works once the code is given');
});

t.test('password reset skips MFA: a valid TOTP code completes the reset of an MFA account', async (t) => {
  const { account, token, secret } = await mfaAccountWithResetToken();
  const res = await resetWith(token, { totp_code: await totpCode(secret) });
  t.equal(res.status, 200);
  t.same(Object.keys(res.body).sort(), ['access_token', 'expires_in', 'token_type'], 'bare token response');
  t.ok(refreshTokenFrom(res), 'refresh cookie set');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(account.accessToken) })).status, 401, 'earlier sessions revoked');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(res.body.access_token) })).status, 200, 'the new token works');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: account.email, password: OTHER_PASSWORD, totp_code: await totpCode(secret, 1) } })).status, 200, 'the new password (with MFA) logs in');
});

t.test('password reset skips MFA: a valid recovery code completes the reset and is spent', async (t) => {
  const { account, token, codes } = await mfaAccountWithResetToken();
  const res = await resetWith(token, { recovery_code: codes[0] });
  t.equal(res.status, 200);
  t.ok(refreshTokenFrom(res), 'refresh cookie set');
  t.equal(await countRows(cp, 'auth_recovery_code', 'user_id = ? and used_at is not null', [account.id]), 1, 'the recovery code is spent');
  const reuse = await cp.request('POST', '/v1/auth/login', { json: { email: account.email, password: OTHER_PASSWORD, recovery_code: codes[0] } });
  t.equal(reuse.status, 401, 'and refused at login');
});

t.test('password reset skips MFA: wrong codes get 401, change nothing and spend the account\'s TOTP budget', async (t) => {
  const { account, token, secret } = await mfaAccountWithResetToken();
  const hash = await passwordHashOf(account.id);
  const right = await totpCode(secret);
  const wrong = right === '000000' ? '111111' : '000000';
  const attempts: Record<string, unknown>[] = [{ totp_code: wrong }, { recovery_code: 'AAAA-BBBB-CCCC' }, { totp_code: wrong }, { totp_code: wrong }, { totp_code: wrong }];
  for (const extra of attempts) {
    const res = await resetWith(token, extra);
    t.equal(res.status, 401, JSON.stringify(extra));
    t.equal(res.body.code, 'UNAUTHORIZED');
  }
  const limited = await resetWith(token, { totp_code: right });
  t.equal(limited.status, 429, 'the sixth code within 5 minutes is refused, even a right one');
  t.equal(limited.body.code, 'RATE_LIMITED');
  t.ok(Number(limited.headers.get('retry-after')) >= 1);
  t.equal(await passwordHashOf(account.id), hash, 'password unchanged');
  t.equal(await countRows(cp, 'auth_one_time_token', `user_id = ? and purpose = 'password_reset' and used_at is null`, [account.id]), 1, 'the reset token is not spent');
  await resetRateLimit(cp, `totp:account:user:${account.id}`);
  t.equal((await resetWith(token, { totp_code: right })).status, 200, 'with budget again, the right code resets');
});

t.test('POST /v1/auth/password/reset refuses a malformed totp_code or recovery_code with 400 naming it', async (t) => {
  const { account, token } = await mfaAccountWithResetToken();
  const cases: [Record<string, unknown>, string][] = [
    [{ totp_code: '12ab56' }, 'totp_code'],
    [{ totp_code: 123456 }, 'totp_code'],
    [{ totp_code: '123456789' }, 'totp_code'],
    [{ recovery_code: 'short' }, 'recovery_code'],
    [{ recovery_code: 'x'.repeat(33) }, 'recovery_code'],
  ];
  for (const [extra, field] of cases) {
    const res = await resetWith(token, extra);
    t.equal(res.status, 400, JSON.stringify(extra));
    t.same(res.body.errors.map((e: { field: string }) => e.field), [field]);
  }
  t.equal(await countRows(cp, 'auth_one_time_token', `user_id = ? and purpose = 'password_reset' and used_at is null`, [account.id]), 1, 'the reset token is not spent');
});
