// verify-pin and profile tokens (document 1 §4.2, part 5.8) through the real
// server on PostgreSQL and Redis: the token and what it is bound to, the
// wrong-PIN budget per profile (also under parallel guesses), and the rule
// that a PIN-protected profile is changed or deleted only with its token.
import t from 'tap';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieHeader, createAdmin, createLoggedInUser, login, query, RELAXED_LIMITS, resetRateLimit, type TestAccount,
} from '../../../test/support/auth.ts';
import { PIN_BUDGET, pinBudgetKey } from '../accounts/index.ts';
import { PROFILE_TOKEN_TTL_SECONDS } from './token-service.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

/** A user whose plan allows 6 profiles (a live subscription inserted directly; no billing routes yet). */
async function subscriber(server: TestControlPlane = cp): Promise<TestAccount> {
  const account = await createLoggedInUser(server);
  const planId = crypto.randomUUID();
  const now = new Date();
  await query(server, `insert into billing_plan (id, name, type, price_minor, currency, billing_cycle, max_profiles, max_concurrent_streams, max_devices,
                         max_quality, has_downloads, has_ads, is_active, created_at, updated_at)
                       values (?, 'Family', 'svod', 1599, 'EUR', 'monthly', 6, 4, 10, 'UHD_4K', true, false, true, ?, ?)`, [planId, now, now]);
  await query(server, `insert into billing_subscription (id, user_id, plan_id, type, status, price_minor, currency, billing_cycle, max_profiles,
                         max_concurrent_streams, max_devices, current_period_start, current_period_end, created_at, updated_at)
                       values (?, ?, ?, 'svod', 'active', 1599, 'EUR', 'monthly', 6, 4, 10, ?, ?, ?, ?)`,
  [crypto.randomUUID(), account.id, planId, now, new Date(now.getTime() + 30 * 86_400_000), now, now]);
  return account;
}

async function createProfile(account: TestAccount, json: Record<string, unknown>, server: TestControlPlane = cp): Promise<string> {
  const res = await server.request('POST', '/v1/users/me/profiles', { headers: bearer(account.accessToken), json });
  if (res.status !== 201) throw new Error(`create profile: ${res.status} ${res.text}`);
  return res.body.data.id;
}

const verifyPin = (account: { accessToken: string }, profileId: string, pin: unknown, server: TestControlPlane = cp) =>
  server.request('POST', `/v1/users/me/profiles/${profileId}/verify-pin`, { headers: bearer(account.accessToken), json: { pin } });

const put = (account: { accessToken: string }, profileId: string, json: unknown, profileToken?: string, server: TestControlPlane = cp) =>
  server.request('PUT', `/v1/users/me/profiles/${profileId}`, { headers: bearer(account.accessToken, profileToken ? { 'x-profile-token': profileToken } : {}), json });

const profileRow = async (id: string) => (await query(cp, 'select * from profile where id = ?', [id]))[0]!;

t.test('POST /v1/users/me/profiles/{id}/verify-pin returns a bare profile token valid 3600 s, bound to the user, session and profile', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Parent', pin: '482910' });
  const res = await verifyPin(a, id, '482910');
  t.equal(res.status, 200, res.text);
  t.same(Object.keys(res.body).sort(), ['expires_in', 'profile_token'], 'bare, no data envelope');
  t.equal(res.body.expires_in, 3600);
  const claims = decodeJwt(res.body.profile_token);
  t.equal(decodeProtectedHeader(res.body.profile_token).typ, 'profile+jwt');
  t.equal(claims.sub, a.id);
  t.equal(claims.sid, decodeJwt(a.accessToken).sid);
  t.equal(claims.profile_id, id);
  t.equal(claims.exp! - claims.iat!, 3600);
});

t.test('POST /v1/users/me/profiles/{id}/verify-pin refuses a wrong PIN with 400 on pin and a profile without a PIN with 409', async (t) => {
  const a = await subscriber();
  const locked = await createProfile(a, { name: 'Locked', pin: '1111' });
  const wrong = await verifyPin(a, locked, '1112');
  t.equal(wrong.status, 400);
  t.equal(wrong.body.code, 'VALIDATION_ERROR');
  t.same(wrong.body.errors, [{ field: 'pin', message: 'Incorrect PIN' }]);
  t.equal(wrong.body.profile_token, undefined);
  const open = await createProfile(a, { name: 'Open' });
  const none = await verifyPin(a, open, '1111');
  t.equal(none.status, 409);
  t.equal(none.body.code, 'CONFLICT');
});

t.test('POST /v1/users/me/profiles/{id}/verify-pin refuses malformed PINs with 400 before any check, spending nothing', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Locked', pin: '2222' });
  for (const pin of ['123', '1234567', '12a4', 1234, null, '', ' 2222']) {
    const res = await verifyPin(a, id, pin);
    t.equal(res.status, 400, JSON.stringify(pin));
    t.ok(res.body.errors.some((e: { field: string }) => e.field === 'pin'), JSON.stringify(pin));
  }
  const extra = await cp.request('POST', `/v1/users/me/profiles/${id}/verify-pin`, { headers: bearer(a.accessToken), json: { pin: '2222', remember: true } });
  t.equal(extra.status, 400, 'unknown fields are refused');
  t.equal(await cp.app.store.get(`rl:${pinBudgetKey(id)}`), null, 'no wrong-PIN budget spent');
  t.equal((await verifyPin(a, id, '2222')).status, 200);
});

t.test('POST /v1/users/me/profiles/{id}/verify-pin answers 404 for another user\'s profile, administrators included', async (t) => {
  const owner = await subscriber();
  const id = await createProfile(owner, { name: 'Mine', pin: '3333' });
  const other = await createLoggedInUser(cp);
  const admin = await createAdmin(cp);
  for (const caller of [other, admin]) {
    const res = await verifyPin(caller, id, '3333');
    t.equal(res.status, 404);
    t.equal(res.body.code, 'NOT_FOUND');
  }
  t.equal((await verifyPin(owner, crypto.randomUUID(), '3333')).status, 404, 'an unknown profile');
  t.equal(await cp.app.store.get(`rl:${pinBudgetKey(id)}`), null, 'nothing counted against the owner\'s profile');
});

t.test('POST /v1/users/me/profiles/{id}/verify-pin allows 5 wrong PINs per profile per 15 minutes, then 429 even for the right PIN', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Target', pin: '5555' });
  const sibling = await createProfile(a, { name: 'Sibling', pin: '5555' });
  for (let i = 1; i <= 4; i++) t.equal((await verifyPin(a, id, '0000')).status, 400, `wrong PIN ${i}`);
  t.equal((await verifyPin(a, id, '5555')).status, 200, 'the right PIN still works after 4 wrong ones, and spends nothing');
  t.equal((await verifyPin(a, id, '0000')).status, 400, 'wrong PIN 5');
  const blocked = await verifyPin(a, id, '5555');
  t.equal(blocked.status, 429, 'the budget is spent: even the right PIN is refused');
  t.equal(blocked.body.code, 'RATE_LIMITED');
  t.equal(blocked.body.profile_token, undefined);
  const retryAfter = Number(blocked.headers.get('retry-after'));
  t.ok(retryAfter >= 1 && retryAfter <= PIN_BUDGET.windowSeconds, `Retry-After ${retryAfter} within the 15-minute window`);
  t.equal((await verifyPin(a, sibling, '5555')).status, 200, 'another profile of the account keeps its own budget');
  // The window ending is the store's expiry (Redis TTL); forgetting the counter stands in for it.
  await resetRateLimit(cp, pinBudgetKey(id));
  t.equal((await verifyPin(a, id, '5555')).status, 200, 'a new window accepts the PIN again');
});

t.test('POST /v1/users/me/profiles/{id}/verify-pin takes parallel guesses one at a time: exactly 5 are checked', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Target', pin: '8642' });
  const guesses = Array.from({ length: 24 }, (_, i) => String(1000 + i));
  const answers = await Promise.all(guesses.map((pin) => verifyPin(a, id, pin)));
  const statuses = answers.map((r) => r.status).sort();
  t.same(statuses, [...Array(5).fill(400), ...Array(19).fill(429)], 'five wrong answers, the rest refused unchecked');
});

t.test('PUT and DELETE of a PIN-protected profile need its profile token; without one 403 PROFILE_TOKEN_REQUIRED changes nothing', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Parent', pin: '7777', content_rating_limit: 'TV-MA' });
  const before = await profileRow(id);
  for (const [what, token] of [['no token', undefined], ['garbage', 'not-a-token'], ['the access token in its place', a.accessToken]] as const) {
    const res = await put(a, id, { name: 'Hijacked', pin: null }, token);
    t.equal(res.status, 403, what);
    t.equal(res.body.code, 'PROFILE_TOKEN_REQUIRED', what);
    const del = await cp.request('DELETE', `/v1/users/me/profiles/${id}`, { headers: bearer(a.accessToken, token ? { 'x-profile-token': token } : {}) });
    t.equal(del.status, 403, `DELETE with ${what}`);
    t.equal(del.body.code, 'PROFILE_TOKEN_REQUIRED');
  }
  t.same(await profileRow(id), before, 'unchanged');

  const token = (await verifyPin(a, id, '7777')).body.profile_token;
  const renamed = await put(a, id, { name: 'Parent 2' }, token);
  t.equal(renamed.status, 200, renamed.text);
  t.match(renamed.body.data, { name: 'Parent 2', pin_protected: true });
  const cleared = await put(a, id, { name: 'Parent 2', pin: null }, token);
  t.equal(cleared.status, 200);
  t.equal(cleared.body.data.pin_protected, false, 'pin: null removes the PIN');
  t.equal((await profileRow(id)).pin_hash, null);
  t.equal((await put(a, id, { name: 'Open now' })).status, 200, 'an open profile needs no token');
  t.equal((await put(a, id, { name: 'Open now', pin: '4321' })).status, 200, 'setting a PIN on an open profile needs none');
  t.equal((await put(a, id, { name: 'Relocked' }, token)).status, 403, 'a token for the former PIN does not open the new one');
});

t.test('changing a profile\'s PIN voids the profile tokens issued for the former PIN', async (t) => {
  const a = await subscriber();
  const id = await createProfile(a, { name: 'Parent', pin: '1000' });
  const first = (await verifyPin(a, id, '1000')).body.profile_token;
  const second = (await verifyPin(a, id, '1000')).body.profile_token;
  t.equal((await put(a, id, { name: 'Parent', pin: '2000' }, first)).status, 200, 'the PIN changes with a valid token');
  const stale = await put(a, id, { name: 'Parent' }, second);
  t.equal(stale.status, 403, 'another token for the former PIN is refused');
  t.equal(stale.body.code, 'PROFILE_TOKEN_REQUIRED');
  t.equal((await verifyPin(a, id, '1000')).status, 400, 'the former PIN is wrong now');
  const fresh = (await verifyPin(a, id, '2000')).body.profile_token;
  t.equal((await put(a, id, { name: 'Parent' }, fresh)).status, 200, 'a token for the new PIN works');
});

t.test('a profile token is refused for another profile, another session and after tampering', async (t) => {
  const a = await subscriber();
  const first = await createProfile(a, { name: 'First', pin: '1212' });
  const second = await createProfile(a, { name: 'Second', pin: '3434' });
  const token = (await verifyPin(a, first, '1212')).body.profile_token as string;
  t.equal((await put(a, first, { name: 'First' }, token)).status, 200, 'its own profile, its own session');

  const forSecond = await put(a, second, { name: 'Second', pin: null }, token);
  t.equal(forSecond.status, 403, 'another profile');
  t.equal(forSecond.body.code, 'PROFILE_TOKEN_REQUIRED');

  const elsewhere = await login(cp, a.email);
  const otherSession = await put(elsewhere, first, { name: 'First' }, token);
  t.equal(otherSession.status, 403, 'another session of the same account');

  const [header, payload, signature] = token.split('.');
  const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString());
  const forged = `${header}.${Buffer.from(JSON.stringify({ ...claims, profile_id: second })).toString('base64url')}.${signature}`;
  t.equal((await put(a, second, { name: 'Second' }, forged)).status, 403, 'a token whose claims were changed');

  const b = await subscriber();
  const bProfile = await createProfile(b, { name: 'B', pin: '5656' });
  const bToken = (await verifyPin(b, bProfile, '5656')).body.profile_token;
  t.equal((await put(a, first, { name: 'First' }, bToken)).status, 403, 'another user\'s token');

  await cp.request('POST', '/v1/auth/logout', { headers: bearer(a.accessToken) });
  t.equal((await put(a, first, { name: 'First' }, token)).status, 401, 'the session it belongs to has ended (its access token with it)');
});

t.test('a profile token expires 3600 s after issue (clock moved, not waited for)', async (t) => {
  let offsetMs = 0;
  const clocked = await startTestControlPlane(t, { env: RELAXED_LIMITS, clock: { now: () => new Date(Date.now() + offsetMs) } });
  const a = await subscriber(clocked);
  const id = await createProfile(a, { name: 'Parent', pin: '9090' }, clocked);
  const token = (await verifyPin(a, id, '9090', clocked)).body.profile_token as string;
  // The access token lasts 15 minutes: refresh the same session as the clock moves.
  const refreshed = async () => {
    const res = await clocked.request('POST', '/v1/auth/refresh', { headers: cookieHeader(refreshToken) });
    if (res.status !== 200) throw new Error(`refresh: ${res.status} ${res.text}`);
    refreshToken = res.headers.getSetCookie().find((l) => l.startsWith('refresh_token='))!.split(';')[0]!.slice('refresh_token='.length);
    return { accessToken: res.body.data.access_token as string };
  };
  let refreshToken = a.refreshToken;
  offsetMs = (PROFILE_TOKEN_TTL_SECONDS - 10) * 1000;
  t.equal((await put(await refreshed(), id, { name: 'Parent' }, token, clocked)).status, 200, 'valid shortly before its expiry');
  offsetMs = (PROFILE_TOKEN_TTL_SECONDS + 6) * 1000; // past exp and the 5 s tolerance
  const expired = await put(await refreshed(), id, { name: 'Parent' }, token, clocked);
  t.equal(expired.status, 403, 'refused after expiry, in the same session');
  t.equal(expired.body.code, 'PROFILE_TOKEN_REQUIRED');
});
