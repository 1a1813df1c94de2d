import t from 'tap';
import { decodeJwt } from 'jose';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieAttributes, cookieHeader, createLoggedInUser, login, query, refreshCookieLine, RELAXED_LIMITS,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const sid = (accessToken: string) => decodeJwt(accessToken).sid as string;
const list = (accessToken: string) => cp.request('GET', '/v1/me/auth/sessions', { headers: bearer(accessToken) });

t.test('GET /v1/me/auth/sessions lists the active sessions with is_current', async (t) => {
  const a = await createLoggedInUser(cp);
  const tv = await login(cp, a.email, a.password, { device_type: 'smart_tv', platform: 'webos' }, { 'x-forwarded-for': '203.0.113.9' });
  const stranger = await createLoggedInUser(cp);
  const res = await list(a.accessToken);
  t.equal(res.status, 200);
  t.equal(res.body.data.length, 2, 'only this account\'s sessions');
  const ids = res.body.data.map((s: { session_id: string }) => s.session_id).sort();
  t.same(ids, [sid(a.accessToken), sid(tv.accessToken)].sort());
  t.notOk(ids.includes(sid(stranger.accessToken)));
  const current = res.body.data.filter((s: { is_current: boolean }) => s.is_current);
  t.equal(current.length, 1);
  t.equal(current[0].session_id, sid(a.accessToken));
  const other = res.body.data.find((s: { session_id: string }) => s.session_id === sid(tv.accessToken));
  t.match(other, { device_type: 'smart_tv', platform: 'webos', is_current: false, ip_address_hint: String, created_at: String, last_active_at: String });
  t.same(Object.keys(other).sort(), ['created_at', 'device_type', 'ip_address_hint', 'is_current', 'last_active_at', 'platform', 'session_id']);
  const fromTv = await list(tv.accessToken);
  t.equal(fromTv.body.data.find((s: { is_current: boolean }) => s.is_current).session_id, sid(tv.accessToken), 'is_current follows the caller');
});

t.test('DELETE /v1/me/auth/sessions/{id} ends another session at once', async (t) => {
  const a = await createLoggedInUser(cp);
  const phone = await login(cp, a.email);
  const res = await cp.request('DELETE', `/v1/me/auth/sessions/${sid(phone.accessToken)}`, { headers: bearer(a.accessToken) });
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(phone.accessToken) })).status, 401, 'its access token is refused at once');
  t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(phone.refreshToken) })).status, 401, 'its refresh token is dead');
  t.same((await list(a.accessToken)).body.data.map((s: { session_id: string }) => s.session_id), [sid(a.accessToken)], 'no longer listed');
  const again = await cp.request('DELETE', `/v1/me/auth/sessions/${sid(phone.accessToken)}`, { headers: bearer(a.accessToken) });
  t.equal(again.status, 404, 'an ended session is not found');
});

t.test('DELETE /v1/me/auth/sessions/current logs out', async (t) => {
  const a = await createLoggedInUser(cp);
  const other = await login(cp, a.email);
  const res = await cp.request('DELETE', '/v1/me/auth/sessions/current', { headers: { ...bearer(a.accessToken), ...cookieHeader(a.refreshToken) } });
  t.equal(res.status, 204);
  t.equal(cookieAttributes(refreshCookieLine(res)!).get('max-age'), '0', 'cookie cleared');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 401);
  t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(a.refreshToken) })).status, 401);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(other.accessToken) })).status, 200, 'other sessions continue');
});

t.test('DELETE /v1/me/auth/sessions/{own current id} is the same as current', async (t) => {
  const a = await createLoggedInUser(cp);
  const res = await cp.request('DELETE', `/v1/me/auth/sessions/${sid(a.accessToken)}`, { headers: bearer(a.accessToken) });
  t.equal(res.status, 204);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 401);
});

t.test('DELETE /v1/me/auth/sessions/{id} cannot end another account\'s session (404)', async (t) => {
  const a = await createLoggedInUser(cp);
  const b = await createLoggedInUser(cp);
  const res = await cp.request('DELETE', `/v1/me/auth/sessions/${sid(b.accessToken)}`, { headers: bearer(a.accessToken) });
  t.equal(res.status, 404);
  t.equal(res.body.code, 'NOT_FOUND');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(b.accessToken) })).status, 200, 'the other session lives on');
  const unknown = await cp.request('DELETE', `/v1/me/auth/sessions/${crypto.randomUUID()}`, { headers: bearer(a.accessToken) });
  t.equal(unknown.status, 404);
});

t.test('DELETE /v1/me/auth/sessions/{id} refuses an id that is neither a uuid nor current', async (t) => {
  const a = await createLoggedInUser(cp);
  for (const bad of ['abc', 'CURRENT', `${crypto.randomUUID()}x`]) {
    const res = await cp.request('DELETE', `/v1/me/auth/sessions/${bad}`, { headers: bearer(a.accessToken) });
    t.equal(res.status, 400, bad);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.same(res.body.errors.map((e: { field: string }) => e.field), ['session_id']);
  }
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200, 'nothing revoked');
});

t.test('session routes need a token', async (t) => {
  t.equal((await cp.request('GET', '/v1/me/auth/sessions')).status, 401);
  t.equal((await cp.request('DELETE', '/v1/me/auth/sessions/current')).status, 401);
});

t.test('regression: a session\'s last_active_at moved only when its refresh token was used; API calls with its access tokens move it, at most once a minute', async (t) => {
  // Real time, which the test moves forward (a minute on) for this control plane only.
  const clock = { skewMs: 0, now: () => new Date(Date.now() + clock.skewMs) };
  const own = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock });
  const a = await createLoggedInUser(own);
  const session = sid(a.accessToken);
  const lastActive = async () => new Date((await query<{ last_active_at: string }>(own, 'select last_active_at from auth_session where id = ?', [session]))[0]!.last_active_at);
  const longAgo = new Date('2026-01-01T00:00:00Z');
  await query(own, 'update auth_session set last_active_at = ? where id = ?', [longAgo, session]);

  const before = clock.now();
  t.equal((await own.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200);
  t.ok((await lastActive()) >= new Date(before.getTime() - 1000), 'an API call marks the session active');
  const listed = await own.request('GET', '/v1/me/auth/sessions', { headers: bearer(a.accessToken) });
  t.ok(new Date(listed.body.data[0].last_active_at) >= new Date(before.getTime() - 1000), 'and the session list shows it');

  // Within the same minute further calls write nothing (one update a minute, whatever the request rate).
  await query(own, 'update auth_session set last_active_at = ? where id = ?', [longAgo, session]);
  for (let i = 0; i < 3; i++) t.equal((await own.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200);
  t.same(await lastActive(), longAgo, 'not written again within the minute');

  clock.skewMs += 61_000;
  t.equal((await own.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200);
  t.ok((await lastActive()) > longAgo, 'a minute on, the next call marks it again');

  // A revoked session is not touched (its tokens are refused anyway).
  await query(own, 'update auth_session set last_active_at = ? where id = ?', [longAgo, session]);
  t.equal((await own.request('POST', '/v1/auth/logout', { headers: bearer(a.accessToken) })).status, 200);
  clock.skewMs += 61_000;
  t.equal((await own.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 401);
  t.same(await lastActive(), longAgo);
});
