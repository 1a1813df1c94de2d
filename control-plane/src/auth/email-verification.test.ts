import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, CONFIRMED_SUBJECT, cookieHeader, countRows, login, messagesTo, OTHER_PASSWORD, PASSWORD, query, register, RELAXED_LIMITS, RESET_SUBJECT,
  tokenFromLatest, uniqueEmail, VERIFY_SUBJECT,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

t.test('POST /v1/auth/email/verify with the e-mailed token alone activates the account and keeps the password chosen at registration; the token works once', async (t) => {
  const { email, id } = await register(cp);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const res = await cp.request('POST', '/v1/auth/email/verify', { json: { token } });
  t.equal(res.status, 200);
  t.match(res.body.data, { id, email, email_verified: true, status: 'active', roles: ['subscriber'] });
  t.equal((await login(cp, email, PASSWORD)).res.status, 200, 'the registration password signs in');
  const again = await cp.request('POST', '/v1/auth/email/verify', { json: { token } });
  t.equal(again.status, 400);
  t.equal(again.body.code, 'VALIDATION_ERROR');
  t.same(again.body.errors.map((e: { field: string }) => e.field), ['token']);
  t.equal(await countRows(cp, 'audit_log', `action = 'user.email_verified' and resource_id = ? and metadata->>'earlier_credential' = 'kept'`, [id]), 1);
  const [row] = await query<{ password_confirmed: boolean }>(cp, 'select password_confirmed from app_user where id = ?', [id]);
  t.equal(row!.password_confirmed, false, 'nobody showed that the owner chose the password');
  t.equal((await messagesTo(cp, email)).filter((m) => RESET_SUBJECT.test(m.subject)).length, 0, 'no reset link is sent');
});

t.test('verifying with the password chosen at registration keeps it and counts it as the owner\'s', async (t) => {
  const { email, id } = await register(cp);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token, password: PASSWORD } })).status, 200);
  t.equal((await login(cp, email, PASSWORD)).res.status, 200);
  const [row] = await query<{ password_confirmed: boolean }>(cp, 'select password_confirmed from app_user where id = ?', [id]);
  t.equal(row!.password_confirmed, true);
  t.equal(await countRows(cp, 'audit_log', `action = 'user.email_verified' and resource_id = ? and metadata->>'earlier_credential' = 'confirmed'`, [id]), 1);
});

t.test('a session opened before the address is verified does not survive the verification, whoever opened it', async (t) => {
  // Whoever registered the address (perhaps not its owner) signs in before verification, twice.
  const { email, id } = await register(cp, { password: OTHER_PASSWORD });
  const early = await login(cp, email, OTHER_PASSWORD);
  const other = await login(cp, email, OTHER_PASSWORD);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  // Verified from one of those sessions: it ends too.
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token }, headers: bearer(early.accessToken) })).status, 200);
  for (const session of [early, other]) {
    t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(session.accessToken) })).status, 401, 'its access token is refused');
    t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(session.refreshToken) })).status, 401, 'and it cannot be refreshed');
  }
  t.equal(await countRows(cp, 'auth_session', 'user_id = ? and revoked_at is null', [id]), 0);
  t.equal(await countRows(cp, 'auth_session', `user_id = ? and revoked_reason = 'email_verified'`, [id]), 2);
  const after = await login(cp, email, OTHER_PASSWORD);
  t.equal((await cp.request('GET', '/v1/me/auth/sessions', { headers: bearer(after.accessToken) })).status, 200, 'a session opened after it works');
});

t.test('once the address is confirmed, its owner is e-mailed a notice saying to reset the password if they did not sign up', async (t) => {
  const { email } = await register(cp, { body: { display_name: 'Ann' } });
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token: await tokenFromLatest(cp, email, VERIFY_SUBJECT) } })).status, 200);
  const [verification, notice] = await messagesTo(cp, email);
  t.match(verification!.text, /If you did not create this account, do not confirm it: whoever did chose its password\. If you already confirmed it, reset the password/);
  t.match(notice!.subject, CONFIRMED_SUBJECT);
  t.match(notice!.text, /Hello Ann,/);
  t.match(notice!.text, /If you did not create this account, someone else chose its password and can sign in with it\. Reset the password now: that signs out every session/);
  t.match(notice!.text, /Every session opened before the confirmation was signed out/);
  t.same(notice!.links.map((l) => new URL(l).pathname), ['/forgot-password', '/login']);
  // The notice's link leads to a reset that ends every session and leaves the owner's password the only one.
  const squatter = await login(cp, email, PASSWORD);
  t.equal((await cp.request('POST', '/v1/auth/password/forgot', { json: { email } })).status, 200);
  const reset = await cp.request('POST', '/v1/auth/password/reset', { json: { token: await tokenFromLatest(cp, email, RESET_SUBJECT), new_password: OTHER_PASSWORD } });
  t.equal(reset.status, 200);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(squatter.accessToken) })).status, 401);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email, password: PASSWORD } })).status, 401);
});

t.test('verifying with new_password replaces the password set before verification and ends every session', async (t) => {
  const { email } = await register(cp, { password: OTHER_PASSWORD });
  const squatter = await login(cp, email, OTHER_PASSWORD);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const res = await cp.request('POST', '/v1/auth/email/verify', { json: { token, new_password: 'Owners-Own-Pass-9' } });
  t.equal(res.status, 200);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(squatter.accessToken) })).status, 401);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email, password: OTHER_PASSWORD } })).status, 401);
  t.equal((await login(cp, email, 'Owners-Own-Pass-9')).res.status, 200);
  t.equal((await messagesTo(cp, email)).filter((m) => RESET_SUBJECT.test(m.subject)).length, 0, 'no reset link needed');
});

t.test('verification with a wrong password, or with both password and new_password, is 400 and changes nothing', async (t) => {
  const { email, id } = await register(cp);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const hash = async () => (await query<{ password_hash: string }>(cp, 'select password_hash from app_user where id = ?', [id]))[0]!.password_hash;
  const stored = await hash();
  for (const [json, field] of [
    [{ token, password: 'Not-The-Password-1' }, 'password'],
    [{ token, password: PASSWORD, new_password: 'Another-Pass-42' }, 'new_password'],
    [{ token, new_password: 'weak' }, 'new_password'],
  ] as const) {
    const res = await cp.request('POST', '/v1/auth/email/verify', { json });
    t.equal(res.status, 400, JSON.stringify(json));
    t.same([...new Set(res.body.errors.map((e: { field: string }) => e.field))], [field]);
  }
  const [row] = await query<{ status: string }>(cp, 'select status from app_user where id = ?', [id]);
  t.equal(row!.status, 'pending_verification');
  t.equal(await hash(), stored, 'the password is untouched');
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token, password: PASSWORD } })).status, 200, 'the token still works');
});

t.test('POST /v1/auth/email/verify refuses an unknown or expired token and changes nothing', async (t) => {
  const { email, id } = await register(cp);
  const unknown = await cp.request('POST', '/v1/auth/email/verify', { json: { token: 'x'.repeat(43) } });
  t.equal(unknown.status, 400);
  t.equal(unknown.body.code, 'VALIDATION_ERROR');
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  await query(cp, `update auth_one_time_token set expires_at = now() - interval '1 second' where user_id = ?`, [id]);
  const expired = await cp.request('POST', '/v1/auth/email/verify', { json: { token } });
  t.equal(expired.status, 400);
  t.equal(expired.body.errors[0].field, 'token');
  const [row] = await query<{ status: string; email_verified: boolean }>(cp, 'select status, email_verified from app_user where id = ?', [id]);
  t.same(row, { status: 'pending_verification', email_verified: false });
});

const badVerifyBodies: [string, unknown, string][] = [
  ['a missing token', {}, 'token'],
  ['a token of the wrong type', { token: 12345678901234567 }, 'token'],
  ['a token over 512 characters', { token: 'a'.repeat(513) }, 'token'],
  ['a token that is too short', { token: 'abc' }, 'token'],
  ['an unknown field', { token: 'a'.repeat(40), email: 'a@example.com' }, 'email'],
];
for (const [what, body, field] of badVerifyBodies) {
  t.test(`POST /v1/auth/email/verify refuses ${what} with 400 naming ${field}`, async (t) => {
    const spent = await countRows(cp, 'auth_one_time_token', 'used_at is not null');
    const active = await countRows(cp, 'app_user', `status = 'active'`);
    const res = await cp.request('POST', '/v1/auth/email/verify', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), JSON.stringify(res.body.errors));
    t.equal(await countRows(cp, 'auth_one_time_token', 'used_at is not null'), spent);
    t.equal(await countRows(cp, 'app_user', `status = 'active'`), active);
  });
}

t.test('before verification: login works, only verify/resend/logout/me are allowed (403 EMAIL_NOT_VERIFIED)', async (t) => {
  const { email } = await register(cp);
  const { accessToken } = await login(cp, email);
  const me = await cp.request('GET', '/v1/users/me', { headers: bearer(accessToken) });
  t.equal(me.status, 200);
  t.equal(me.body.data.status, 'pending_verification');
  for (const [method, path, json] of [
    ['PATCH', '/v1/users/me', { display_name: 'x' }],
    ['GET', '/v1/me/auth/sessions', undefined],
    ['POST', '/v1/me/auth/mfa/setup', undefined],
    ['POST', '/v1/users/me/password', { current_password: 'Correct-Horse-42', new_password: 'Another-Pass-42' }],
  ] as const) {
    const res = await cp.request(method, path, { headers: bearer(accessToken), json });
    t.equal(res.status, 403, `${method} ${path}`);
    t.equal(res.body.code, 'EMAIL_NOT_VERIFIED', `${method} ${path}`);
  }
  const resend = await cp.request('POST', '/v1/auth/email/resend', { json: { email }, headers: bearer(accessToken) });
  t.equal(resend.status, 200);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token }, headers: bearer(accessToken) })).status, 200);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(accessToken) })).status, 401, 'the session opened before verification ended');
  const after = await login(cp, email);
  t.equal((await cp.request('GET', '/v1/me/auth/sessions', { headers: bearer(after.accessToken) })).status, 200, 'a new session may use the account');
  t.equal((await cp.request('POST', '/v1/auth/logout', { headers: bearer(after.accessToken) })).status, 200);
});

t.test('an unverified account can log out', async (t) => {
  const { email } = await register(cp);
  const { accessToken } = await login(cp, email);
  const res = await cp.request('POST', '/v1/auth/logout', { headers: bearer(accessToken) });
  t.equal(res.status, 200);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(accessToken) })).status, 401);
});

t.test('POST /v1/auth/email/resend sends a new link and only the newest link works', async (t) => {
  const { email } = await register(cp);
  const first = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const res = await cp.request('POST', '/v1/auth/email/resend', { json: { email } });
  t.equal(res.status, 200);
  t.type(res.body.data.message, 'string');
  t.equal((await messagesTo(cp, email)).length, 2);
  const second = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  t.not(second, first);
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token: first } })).status, 400, 'the older link is void');
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token: second } })).status, 200);
});

t.test('POST /v1/auth/email/resend answers the same for unknown and already verified addresses, sending nothing', async (t) => {
  const { email } = await register(cp);
  await cp.request('POST', '/v1/auth/email/verify', { json: { token: await tokenFromLatest(cp, email, VERIFY_SUBJECT), password: PASSWORD } });
  const pending = await register(cp);
  const unknownEmail = uniqueEmail('nobody');
  const responses = [];
  for (const address of [pending.email, email, unknownEmail]) {
    responses.push(await cp.request('POST', '/v1/auth/email/resend', { json: { email: address } }));
  }
  t.same(responses.map((r) => r.status), [200, 200, 200]);
  t.same(responses.map((r) => r.body), [responses[0]!.body, responses[0]!.body, responses[0]!.body], 'identical bodies');
  t.same((await messagesTo(cp, email)).map((m) => CONFIRMED_SUBJECT.test(m.subject)), [false, true], 'no new link for a verified account: its verification e-mail and the notice');
  t.equal((await messagesTo(cp, unknownEmail)).length, 0);
  t.equal((await messagesTo(cp, pending.email)).length, 2);
});

const badEmailBodies: [string, unknown][] = [
  ['a missing email', {}],
  ['an email of the wrong type', { email: true }],
  ['a bad e-mail address', { email: 'nope@' }],
  ['an e-mail over 254 characters', { email: `${'b'.repeat(250)}@example.com` }],
];
for (const [what, body] of badEmailBodies) {
  t.test(`POST /v1/auth/email/resend refuses ${what} with 400 naming email`, async (t) => {
    const tokens = await countRows(cp, 'auth_one_time_token');
    const res = await cp.request('POST', '/v1/auth/email/resend', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.same(res.body.errors.map((e: { field: string }) => e.field), ['email']);
    t.equal(await countRows(cp, 'auth_one_time_token'), tokens);
  });
}
