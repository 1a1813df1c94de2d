import t from 'tap';
import { decodeJwt } from 'jose';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieHeader, createLoggedInUser, login, OTHER_PASSWORD, PASSWORD, query, refreshTokenFrom, RELAXED_LIMITS,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const me = await createLoggedInUser(cp, { display_name: 'Grace', country_code: 'GB' });
const auth = () => bearer(me.accessToken);
const userRow = async (id: string) => (await query(cp, 'select * from app_user where id = ?', [id]))[0]!;

t.test('GET /v1/users/me returns the current user with an ETag', async (t) => {
  const res = await cp.request('GET', '/v1/users/me', { headers: auth() });
  t.equal(res.status, 200);
  t.match(res.body.data, { id: me.id, email: me.email, display_name: 'Grace', country_code: 'GB', status: 'active', roles: ['subscriber'], email_verified: true });
  t.match(res.headers.get('etag'), /^"/);
  t.equal((await cp.request('GET', '/v1/users/me')).status, 401);
});

t.test('GET /v1/users/me costs one round trip: the guard\'s read of the caller seeds the request\'s identity map', async (t) => {
  const statements = await cp.database.statementsDuring(async () => {
    t.equal((await cp.request('GET', '/v1/users/me', { headers: auth() })).status, 200);
  });
  t.equal(statements.length, 1, statements.join('\n'));
  t.match(statements[0], /from app_user u/);
});

t.test('PATCH /v1/users/me updates the given fields only', async (t) => {
  const res = await cp.request('PATCH', '/v1/users/me', {
    headers: auth(),
    json: { display_name: 'Grace H', phone: '+447700900123', timezone: 'Europe/London', country_code: 'ie', preferred_language: 'en-IE', notification_preferences: { marketing: true } },
  });
  t.equal(res.status, 200);
  t.match(res.body.data, { display_name: 'Grace H', phone: '+447700900123', phone_verified: false, timezone: 'Europe/London', country_code: 'IE', preferred_language: 'en-IE' });
  t.equal(res.body.data.notification_preferences.marketing, true);
  t.equal(res.body.data.email, me.email, 'untouched fields stay');
  const read = await cp.request('GET', '/v1/users/me', { headers: auth() });
  t.equal(read.body.data.display_name, 'Grace H', 'stored');
  t.equal(read.headers.get('etag'), res.headers.get('etag'));
});

t.test('PATCH /v1/users/me honours If-Match: a stale ETag gets 412 and changes nothing', async (t) => {
  const etag = (await cp.request('GET', '/v1/users/me', { headers: auth() })).headers.get('etag')!;
  const ok = await cp.request('PATCH', '/v1/users/me', { headers: { ...auth(), 'if-match': etag }, json: { display_name: 'First' } });
  t.equal(ok.status, 200);
  t.not(ok.headers.get('etag'), etag, 'the ETag moves with the record');
  const stale = await cp.request('PATCH', '/v1/users/me', { headers: { ...auth(), 'if-match': etag }, json: { display_name: 'Second' } });
  t.equal(stale.status, 412);
  t.equal(stale.body.code, 'PRECONDITION_FAILED');
  t.equal((await userRow(me.id)).display_name, 'First');
});

const badPatches: [string, Record<string, unknown>, string][] = [
  ['display_name over 100 characters', { display_name: 'x'.repeat(101) }, 'display_name'],
  ['display_name of the wrong type', { display_name: 5 }, 'display_name'],
  ['a phone over 20 characters', { phone: `+4${'4'.repeat(19)}` }, 'phone'],
  ['a phone not in E.164', { phone: '07700 900123' }, 'phone'],
  ['an unknown time zone', { timezone: 'Mars/Olympus' }, 'timezone'],
  ['a 3-letter country code', { country_code: 'GBR' }, 'country_code'],
  ['a country code not in ISO 3166-1 (ZZ)', { country_code: 'ZZ' }, 'country_code'],
  ['a country code not in ISO 3166-1 (XX)', { country_code: 'XX' }, 'country_code'],
  ['a locale that is not BCP 47', { locale: 'en_GB!' }, 'locale'],
  ['notification_preferences of the wrong type', { notification_preferences: { marketing: 'yes' } }, 'notification_preferences.marketing'],
  ['an unknown preference', { notification_preferences: { sms: true } }, 'notification_preferences.sms'],
  ['a field that cannot be changed here', { email: 'new@example.com' }, 'email'],
  ['roles', { roles: ['admin'] }, 'roles'],
];
for (const [what, body, field] of badPatches) {
  t.test(`PATCH /v1/users/me refuses ${what} with 400 naming ${field}, changing nothing`, async (t) => {
    const before = await userRow(me.id);
    const res = await cp.request('PATCH', '/v1/users/me', { headers: auth(), json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), JSON.stringify(res.body.errors));
    t.same(await userRow(me.id), before, 'row unchanged');
  });
}

t.test('POST /v1/users/me/password returns a token set, keeps this session and ends the others', async (t) => {
  const a = await createLoggedInUser(cp);
  const other = await login(cp, a.email);
  const res = await cp.request('POST', '/v1/users/me/password', { headers: bearer(a.accessToken), json: { current_password: PASSWORD, new_password: OTHER_PASSWORD } });
  t.equal(res.status, 200);
  const set = res.body.data;
  t.match(set, { access_token: String, token_type: 'Bearer', expires_in: 900, refresh_token: String, id_token: String });
  t.equal(set.scope, 'openid profile content:read subscription:read watchlist devices drm');
  t.equal(refreshTokenFrom(res), set.refresh_token, 'the refresh token also comes as the cookie');
  const id = decodeJwt(set.id_token);
  t.equal(id.sub, a.id);
  t.equal(id.email, a.email);
  t.equal(decodeJwt(set.access_token).sid, decodeJwt(a.accessToken).sid, 'this session carries on');

  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(set.access_token) })).status, 200, 'the new access token works');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(other.accessToken) })).status, 401, 'other sessions end at once');
  t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(other.refreshToken) })).status, 401);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 401, 'the old access token is retired');
  t.equal((await cp.request('POST', '/v1/auth/refresh', { headers: cookieHeader(set.refresh_token) })).status, 200, 'the new refresh token works');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: PASSWORD } })).status, 401, 'old password refused');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: a.email, password: OTHER_PASSWORD } })).status, 200, 'new password accepted');
});

t.test('POST /v1/users/me/password refuses a wrong current password, a reused password and bad input, changing nothing', async (t) => {
  const a = await createLoggedInUser(cp);
  const before = (await userRow(a.id)).password_hash;
  const cases: [string, Record<string, unknown>, string][] = [
    ['a wrong current password', { current_password: 'Not-The-Password-1', new_password: OTHER_PASSWORD }, 'current_password'],
    ['the same password again', { current_password: PASSWORD, new_password: PASSWORD }, 'new_password'],
    ['a missing current_password', { new_password: OTHER_PASSWORD }, 'current_password'],
    ['a missing new_password', { current_password: PASSWORD }, 'new_password'],
    ['a new_password of the wrong type', { current_password: PASSWORD, new_password: 12345678901 }, 'new_password'],
    ['a new_password under 10 characters', { current_password: PASSWORD, new_password: 'Ab1!short' }, 'new_password'],
    ['a new_password over 128 characters', { current_password: PASSWORD, new_password: `Ab1!${'q'.repeat(125)}` }, 'new_password'],
    ['a new_password without a special character', { current_password: PASSWORD, new_password: 'NoSpecial12345' }, 'new_password'],
    ['an unknown field', { current_password: PASSWORD, new_password: OTHER_PASSWORD, logout_others: false }, 'logout_others'],
  ];
  for (const [what, body, field] of cases) {
    const res = await cp.request('POST', '/v1/users/me/password', { headers: bearer(a.accessToken), json: body });
    t.equal(res.status, 400, what);
    t.equal(res.body.code, 'VALIDATION_ERROR', what);
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), `${what}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal((await userRow(a.id)).password_hash, before, 'password unchanged');
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(a.accessToken) })).status, 200, 'session untouched');
});
