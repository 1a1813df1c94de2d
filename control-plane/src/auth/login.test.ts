import t from 'tap';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  bearer, cookieAttributes, countRows, createUserDirect, query, refreshCookieLine, RELAXED_LIMITS, uniqueEmail,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const user = await createUserDirect(cp);

t.test('POST /v1/auth/login returns a Bearer JWT and sets the refresh cookie', async (t) => {
  const sessionsBefore = await countRows(cp, 'auth_session', 'user_id = ?', [user.id]);
  const res = await cp.request('POST', '/v1/auth/login', { json: { email: user.email.toUpperCase(), password: user.password }, headers: { 'user-agent': 'Mozilla/5.0 (Windows NT 10.0; Win64; x64)' } });
  t.equal(res.status, 200);
  t.match(res.body, { data: { access_token: String, token_type: 'Bearer', expires_in: 900 } });
  t.same(Object.keys(res.body.data).sort(), ['access_token', 'expires_in', 'token_type'], 'no refresh token in the body');

  const header = decodeProtectedHeader(res.body.data.access_token);
  t.type(header.kid, 'string', 'key id in the header');
  t.ok(['EdDSA', 'ES256'].includes(header.alg!), String(header.alg));
  const claims = decodeJwt(res.body.data.access_token);
  t.equal(claims.sub, user.id);
  t.same(claims.roles, ['subscriber']);
  t.equal(claims.exp! - claims.iat!, 900);
  t.type(claims.jti, 'string');

  const line = refreshCookieLine(res)!;
  t.ok(line, 'refresh cookie set');
  const attributes = cookieAttributes(line);
  t.ok(attributes.has('httponly'), 'HttpOnly');
  t.equal(attributes.get('samesite'), 'Strict');
  t.equal(attributes.get('path'), '/v1/auth');
  t.ok(line.split(';')[0]!.length > 'refresh_token='.length + 20, 'carries a token');

  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [user.id]), sessionsBefore + 1, 'a session is stored');
  const [row] = await query<{ last_login_at: Date | null }>(cp, 'select last_login_at from app_user where id = ?', [user.id]);
  t.ok(row!.last_login_at, 'last_login_at set');
  const me = await cp.request('GET', '/v1/users/me', { headers: bearer(res.body.data.access_token) });
  t.equal(me.status, 200);
  t.equal(me.body.data.id, user.id);
});

t.test('POST /v1/auth/login answers 401 alike for a wrong password and an unknown address', async (t) => {
  const sessions = await countRows(cp, 'auth_session');
  const wrong = await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: 'Wrong-Password-1' } });
  const unknown = await cp.request('POST', '/v1/auth/login', { json: { email: uniqueEmail('ghost'), password: 'Wrong-Password-1' } });
  for (const res of [wrong, unknown]) {
    t.equal(res.status, 401);
    t.equal(res.body.code, 'UNAUTHORIZED');
    t.equal(refreshCookieLine(res), undefined, 'no cookie');
  }
  t.equal(wrong.body.message, unknown.body.message, 'same message');
  t.equal(await countRows(cp, 'auth_session'), sessions, 'no session stored');
});

t.test('POST /v1/auth/login gives a suspended account 403 ACCOUNT_SUSPENDED (only with the right password)', async (t) => {
  const suspended = await createUserDirect(cp, { status: 'suspended' });
  const sessions = await countRows(cp, 'auth_session');
  const res = await cp.request('POST', '/v1/auth/login', { json: { email: suspended.email, password: suspended.password } });
  t.equal(res.status, 403);
  t.equal(res.body.code, 'ACCOUNT_SUSPENDED');
  const wrong = await cp.request('POST', '/v1/auth/login', { json: { email: suspended.email, password: 'Wrong-Password-1' } });
  t.equal(wrong.status, 401, 'a wrong password does not reveal the suspension');
  t.equal(await countRows(cp, 'auth_session'), sessions);
});

t.test('POST /v1/auth/login records device details from the body', async (t) => {
  const res = await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password, device_type: 'smart_tv', platform: 'tizen' } });
  t.equal(res.status, 200);
  const sessions = await cp.request('GET', '/v1/me/auth/sessions', { headers: bearer(res.body.data.access_token) });
  t.match(sessions.body.data.find((s: { is_current: boolean }) => s.is_current), { device_type: 'smart_tv', platform: 'tizen' });
});

t.test('a tampered or foreign access token is refused with 401', async (t) => {
  const res = await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password } });
  const token: string = res.body.data.access_token;
  const [h, p, s] = token.split('.');
  const payload = JSON.parse(Buffer.from(p!, 'base64url').toString());
  const forged = `${h}.${Buffer.from(JSON.stringify({ ...payload, roles: ['superadmin'] })).toString('base64url')}.${s}`;
  for (const bad of [forged, `${h}.${p}.${s!.slice(0, -4)}AAAA`, 'not-a-jwt', `${token}x`]) {
    const me = await cp.request('GET', '/v1/users/me', { headers: bearer(bad) });
    t.equal(me.status, 401);
    t.equal(me.body.code, 'UNAUTHORIZED');
  }
  t.equal((await cp.request('GET', '/v1/users/me')).status, 401, 'no token');
});

const badBodies: [string, Record<string, unknown>, string][] = [
  ['a missing email', { email: undefined }, 'email'],
  ['an email of the wrong type', { email: 7 }, 'email'],
  ['a bad e-mail address', { email: 'user@@example.com' }, 'email'],
  ['an e-mail over 254 characters', { email: `${'c'.repeat(250)}@example.com` }, 'email'],
  ['a missing password', { password: undefined }, 'password'],
  ['a password of the wrong type', { password: { value: 'x' } }, 'password'],
  ['an empty password', { password: '' }, 'password'],
  ['a password over 1024 characters', { password: 'A1!a'.repeat(257) }, 'password'],
  ['a totp_code that is not digits', { totp_code: '12a456' }, 'totp_code'],
  ['a totp_code of 5 digits', { totp_code: '12345' }, 'totp_code'],
  ['a totp_code of 9 digits', { totp_code: '123456789' }, 'totp_code'],
  ['a totp_code as a number', { totp_code: 123456 }, 'totp_code'],
  ['a device_type over 30 characters', { device_type: 'x'.repeat(31) }, 'device_type'],
  ['an unknown field', { remember_me: true }, 'remember_me'],
];
for (const [what, patch, field] of badBodies) {
  t.test(`POST /v1/auth/login refuses ${what} with 400 VALIDATION_ERROR naming ${field}, storing nothing`, async (t) => {
    // A fresh address per case: the per-account login budget (10 per 15 min) counts refused attempts too.
    const body: Record<string, unknown> = { email: uniqueEmail('bad-login'), password: user.password, ...patch };
    for (const key of Object.keys(patch)) if (patch[key] === undefined) delete body[key];
    const sessions = await countRows(cp, 'auth_session');
    const res = await cp.request('POST', '/v1/auth/login', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors.some((e: { field: string }) => e.field === field), JSON.stringify(res.body.errors));
    t.equal(refreshCookieLine(res), undefined);
    t.equal(await countRows(cp, 'auth_session'), sessions, 'no session stored');
  });
}

t.test('regression: concurrent logins of one account answered 412 (each login re-wrote the versioned user row)', async (t) => {
  const user = await createUserDirect(cp);
  const before = (await query<{ version: number }>(cp, 'select version from app_user where id = ?', [user.id]))[0]!.version;
  const answers = await Promise.all(Array.from({ length: 6 }, () => cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password } })));
  t.same(answers.map((r) => r.status), [200, 200, 200, 200, 200, 200], JSON.stringify(answers.map((r) => r.body?.code)));
  const [row] = await query<{ version: number; last_login_at: Date | null }>(cp, 'select version, last_login_at from app_user where id = ?', [user.id]);
  t.ok(row!.last_login_at, 'last_login_at recorded');
  t.equal(row!.version, before + 6, 'every login moved the version (the record changed), none refused another');
});
