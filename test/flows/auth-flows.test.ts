// End-to-end journeys of the authentication issue, each through the real
// server, PostgreSQL and Redis.
import t from 'tap';
import { decodeJwt } from 'jose';
import { startTestControlPlane } from '../support/control-plane.ts';
import {
  bearer, cookieHeader, createLoggedInUser, login, OTHER_PASSWORD, query, refreshTokenFrom, register, RELAXED_LIMITS,
  RESET_SUBJECT, tokenFromLatest, totpCode, VERIFY_SUBJECT,
} from '../support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const me = (accessToken: string) => cp.request('GET', '/v1/users/me', { headers: bearer(accessToken) });
const refresh = (token: string) => cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(token) });

t.test('register → verify via the e-mailed link with the token alone (document 2) → login with the registration password → refresh twice → reuse of the first refresh token revokes the session → login again', async (t) => {
  const { email, password } = await register(cp);
  const token = await tokenFromLatest(cp, email, VERIFY_SUBJECT);
  const verified = await cp.request('POST', '/v1/auth/email/verify', { json: { token } });
  t.equal(verified.status, 200);
  t.equal(verified.body.data.status, 'active');

  const first = await login(cp, email, password);
  t.equal((await me(first.accessToken)).status, 200);
  const r1 = await refresh(first.refreshToken);
  t.equal(r1.status, 200, 'first refresh');
  const r2 = await refresh(refreshTokenFrom(r1)!);
  t.equal(r2.status, 200, 'second refresh');
  const latestAccess = r2.body.data.access_token;
  t.equal((await me(latestAccess)).status, 200);

  const reuse = await refresh(first.refreshToken);
  t.equal(reuse.status, 401, 'the spent first token is refused');
  t.equal((await me(latestAccess)).status, 401, 'the whole session is revoked: even the newest access token');
  t.equal((await refresh(refreshTokenFrom(r2)!)).status, 401, 'and the newest refresh token');

  const again = await login(cp, email, password);
  t.not(decodeJwt(again.accessToken).sid, decodeJwt(first.accessToken).sid, 'a new session');
  t.equal((await me(again.accessToken)).status, 200);
});

t.test('MFA setup → login needs the code → a recovery code works once', async (t) => {
  const a = await createLoggedInUser(cp);
  const setup = await cp.request('POST', '/v1/me/auth/mfa/setup', { headers: bearer(a.accessToken) });
  const secret = setup.body.data.secret;
  const confirm = await cp.request('POST', '/v1/me/auth/mfa/verify', { headers: bearer(a.accessToken), json: { totp_code: await totpCode(secret, -1) } });
  t.equal(confirm.status, 200);
  const codes: string[] = confirm.body.recovery_codes.codes;

  const withoutCode = await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: a.password } });
  t.equal(withoutCode.status, 401);
  t.equal(withoutCode.body.code, 'MFA_REQUIRED');
  const withCode = await login(cp, a.email, a.password, { totp_code: await totpCode(secret) });
  t.equal((await me(withCode.accessToken)).body.data.mfa_enabled, true);
  const withRecovery = await login(cp, a.email, a.password, { recovery_code: codes[0] });
  t.equal((await me(withRecovery.accessToken)).status, 200);
  const reused = await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: a.password, recovery_code: codes[0] } });
  t.equal(reused.status, 401, 'the recovery code works once');
});

t.test('password reset revokes every session and the old access tokens stop working', async (t) => {
  const a = await createLoggedInUser(cp);
  const tv = await login(cp, a.email, a.password, { device_type: 'smart_tv' });
  t.equal((await me(a.accessToken)).status, 200);
  t.equal((await me(tv.accessToken)).status, 200);
  t.equal((await cp.request('POST', '/v1/auth/password/forgot', { json: { email: a.email } })).status, 200);
  const token = await tokenFromLatest(cp, a.email, RESET_SUBJECT);
  const reset = await cp.request('POST', '/v1/auth/password/reset', { json: { token, new_password: OTHER_PASSWORD } });
  t.equal(reset.status, 200);
  for (const old of [a.accessToken, tv.accessToken]) t.equal((await me(old)).status, 401, 'old access token refused');
  for (const old of [a.refreshToken, tv.refreshToken]) t.equal((await refresh(old)).status, 401, 'old refresh token refused');
  const sessions = await cp.request('GET', '/v1/me/auth/sessions', { headers: bearer(reset.body.access_token) });
  t.equal(sessions.body.data.length, 1, 'only the session of the reset remains');
});

t.test('a user without admin permission gets 403 on an admin route; a type-scoped permission does not satisfy an unscoped admin list', async (t) => {
  const a = await createLoggedInUser(cp);
  const denied = await cp.request('GET', '/v1/admin/users', { headers: bearer(a.accessToken) });
  t.equal(denied.status, 403);
  t.equal(denied.body.code, 'FORBIDDEN');
  // The subscriber role holds users.read scoped to type user: it reads its own record...
  t.equal((await me(a.accessToken)).status, 200);
  // ...and a role granting the admin permission itself, but type-scoped, still does not open the unscoped list.
  await query(cp, `insert into role (name, description, created_at) values ('scoped_support', 'test: type-scoped admin read', now()) on conflict do nothing`);
  await query(cp, `insert into role_permission (id, role_name, permission, resource_type, resource_id) values (gen_random_uuid(), 'scoped_support', 'admin.users.read', 'user', null)`);
  await query(cp, `insert into user_role (id, user_id, role_name, created_at) values (gen_random_uuid(), ?, 'scoped_support', now())`, [a.id]);
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(a.accessToken) })).status, 403, 'type-scoped admin.users.read is not enough');
  // The same permission held globally is.
  await query(cp, `insert into role_permission (id, role_name, permission, resource_type, resource_id) values (gen_random_uuid(), 'scoped_support', 'admin.users.read', null, null)`);
  t.equal((await cp.request('GET', '/v1/admin/users', { headers: bearer(a.accessToken) })).status, 200, 'the global grant is');
});
