import t from 'tap';
import { decodeJwt } from 'jose';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieAttributes, cookieHeader, createLoggedInUser, query, refreshCookieLine, refreshTokenFrom, RELAXED_LIMITS,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const refresh = (token?: string) => cp.request('POST', '/v1/auth/refresh', { headers: token ? cookieHeader(token) : {} });

t.test('POST /v1/auth/refresh exchanges the cookie for a new access token and a new cookie', async (t) => {
  const account = await createLoggedInUser(cp);
  const res = await refresh(account.refreshToken);
  t.equal(res.status, 200);
  t.match(res.body.data, { access_token: String, token_type: 'Bearer', expires_in: 900 });
  t.not(res.body.data.access_token, account.accessToken);
  t.equal(decodeJwt(res.body.data.access_token).sid, decodeJwt(account.accessToken).sid, 'same session');
  const next = refreshTokenFrom(res)!;
  t.ok(next);
  t.not(next, account.refreshToken, 'rotated');
  const attributes = cookieAttributes(refreshCookieLine(res)!);
  t.ok(attributes.has('httponly'));
  t.equal(attributes.get('samesite'), 'Strict');
  t.equal(attributes.get('path'), '/v1/auth');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(res.body.data.access_token) })).status, 200);
  t.equal((await refresh(next)).status, 200, 'the new cookie works once more');
});

t.test('POST /v1/auth/refresh with a spent token revokes the whole session', async (t) => {
  const account = await createLoggedInUser(cp);
  const first = await refresh(account.refreshToken);
  const second = refreshTokenFrom(first)!;
  const reuse = await refresh(account.refreshToken);
  t.equal(reuse.status, 401);
  t.equal(reuse.body.code, 'UNAUTHORIZED');
  t.equal(cookieAttributes(refreshCookieLine(reuse)!).get('max-age'), '0', 'the cookie is cleared');
  t.equal((await refresh(second)).status, 401, 'the newest token of the family is dead too');
  for (const access of [account.accessToken, first.body.data.access_token]) {
    t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(access) })).status, 401, 'access tokens of the session are refused at once');
  }
  const [session] = await query<{ revoked_reason: string }>(cp, 'select revoked_reason from auth_session where id = ?', [decodeJwt(account.accessToken).sid]);
  t.equal(session!.revoked_reason, 'refresh_token_reuse');
});

t.test('POST /v1/auth/refresh refuses a missing or unknown cookie with 401', async (t) => {
  const missing = await refresh();
  t.equal(missing.status, 401);
  t.equal(missing.body.code, 'UNAUTHORIZED');
  const unknown = await refresh('rt_' + 'x'.repeat(40));
  t.equal(unknown.status, 401);
  t.equal(cookieAttributes(refreshCookieLine(unknown)!).get('max-age'), '0');
  const other = await cp.request('POST', '/v1/auth/refresh', { headers: { cookie: 'something_else=1' } });
  t.equal(other.status, 401);
});

t.test('POST /v1/auth/refresh for a suspended account answers 403 ACCOUNT_SUSPENDED', async (t) => {
  const account = await createLoggedInUser(cp);
  await query(cp, `update app_user set status = 'suspended' where id = ?`, [account.id]);
  const res = await refresh(account.refreshToken);
  t.equal(res.status, 403);
  t.equal(res.body.code, 'ACCOUNT_SUSPENDED');
});

t.test('POST /v1/auth/logout answers 200, refuses the access token at once and clears the cookie', async (t) => {
  const account = await createLoggedInUser(cp);
  const other = await createLoggedInUser(cp, { email: undefined });
  const res = await cp.request('POST', '/v1/auth/logout', { headers: { ...bearer(account.accessToken), ...cookieHeader(account.refreshToken) } });
  t.equal(res.status, 200);
  t.type(res.body.data.message, 'string');
  const cleared = refreshCookieLine(res)!;
  t.ok(cleared.startsWith('refresh_token=;'), cleared);
  t.equal(cookieAttributes(cleared).get('max-age'), '0');
  t.equal(cookieAttributes(cleared).get('path'), '/v1/auth');
  const me = await cp.request('GET', '/v1/users/me', { headers: bearer(account.accessToken) });
  t.equal(me.status, 401, 'the access token is refused before its expiry');
  t.equal(me.body.code, 'UNAUTHORIZED');
  t.equal((await refresh(account.refreshToken)).status, 401, 'the refresh token is dead');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(other.accessToken) })).status, 200, 'other accounts are untouched');
  const again = await cp.request('POST', '/v1/auth/logout', { headers: bearer(account.accessToken) });
  t.equal(again.status, 401, 'a second logout with the same token is refused');
});

t.test('POST /v1/auth/logout ends only the current session', async (t) => {
  const a = await createLoggedInUser(cp);
  const second = await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: a.password } });
  await cp.request('POST', '/v1/auth/logout', { headers: bearer(a.accessToken) });
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(second.body.data.access_token) })).status, 200);
  t.equal((await refresh(refreshTokenFrom(second))).status, 200);
});

t.test('POST /v1/auth/logout without a token is 401', async (t) => {
  const res = await cp.request('POST', '/v1/auth/logout');
  t.equal(res.status, 401);
  t.equal(res.body.code, 'UNAUTHORIZED');
});
