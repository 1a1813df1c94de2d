import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieHeader, countRows, createLoggedInUser, createUserDirect, login, messagesTo, OTHER_PASSWORD, query,
  refreshTokenFrom, RELAXED_LIMITS, RESET_SUBJECT, tokenFromLatest, uniqueEmail,
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
