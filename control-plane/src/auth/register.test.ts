import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import {
  countRows, login, messagesTo, PASSWORD, query, REGISTRATION_NOTICE_SUBJECT, RELAXED_LIMITS, register, settled, tokenFromLatest, uniqueEmail,
  verifyEmail, VERIFY_SUBJECT,
} from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });

const valid = () => ({ email: uniqueEmail('reg'), password: PASSWORD, accept_terms: true });

t.test('POST /v1/auth/register creates a pending account, stores the terms timestamp and e-mails a verification link', async (t) => {
  const body = { ...valid(), display_name: 'Ada', phone: '+14155550123', locale: 'fr-CA', country_code: 'ca' };
  const before = new Date();
  const res = await cp.request('POST', '/v1/auth/register', { json: body });
  t.equal(res.status, 201);
  t.equal(res.headers.get('location'), '/v1/users/me');
  const user = res.body.data;
  t.match(user, {
    email: body.email, email_verified: false, status: 'pending_verification', display_name: 'Ada', phone: '+14155550123',
    locale: 'fr-CA', country_code: 'CA', roles: ['subscriber'], mfa_enabled: false, last_login_at: null,
  });
  t.ok(new Date(user.terms_accepted_at) >= new Date(before.getTime() - 1000), 'terms_accepted_at returned');
  t.notOk('password' in user || 'password_hash' in user, 'no password in the response');

  const [row] = await query<{ terms_accepted_at: Date; password_hash: string; status: string }>(cp, 'select terms_accepted_at, password_hash, status from app_user where id = ?', [user.id]);
  t.equal(new Date(row!.terms_accepted_at).toISOString(), user.terms_accepted_at, 'terms_accepted_at stored');
  t.match(row!.password_hash, /^\$argon2id\$/, 'password stored as an argon2id hash');
  t.equal(row!.status, 'pending_verification');
  t.equal(await countRows(cp, 'user_role', 'user_id = ? and role_name = ?', [user.id, 'subscriber']), 1, 'subscriber role assigned');

  const mails = await messagesTo(cp, body.email);
  t.equal(mails.length, 1);
  t.match(mails[0]!.subject, VERIFY_SUBJECT);
  t.ok(mails[0]!.links.some((l) => new URL(l).searchParams.get('token')), 'the message links to a token');
});

t.test('POST /v1/auth/register lower-cases the address', async (t) => {
  const email = uniqueEmail('Mixed');
  const res = await cp.request('POST', '/v1/auth/register', { json: { ...valid(), email: email.toUpperCase() } });
  t.equal(res.status, 201);
  t.equal(res.body.data.email, email.toLowerCase());
});

t.test('POST /v1/auth/register takes the locale from Accept-Language when the body has none', async (t) => {
  const fromHeader = await cp.request('POST', '/v1/auth/register', { json: valid(), headers: { 'accept-language': 'de-DE,de;q=0.9,en;q=0.8' } });
  t.equal(fromHeader.body.data.locale, 'de-DE');
  const bodyWins = await cp.request('POST', '/v1/auth/register', { json: { ...valid(), locale: 'it' }, headers: { 'accept-language': 'de-DE' } });
  t.equal(bodyWins.body.data.locale, 'it');
  const garbage = await cp.request('POST', '/v1/auth/register', { json: valid(), headers: { 'accept-language': '*' } });
  t.equal(garbage.status, 201);
  t.equal(garbage.body.data.locale, null);
});

t.test('POST /v1/auth/register answers identically for a verified address, changes nothing and e-mails its owner a notice instead', async (t) => {
  const first = await register(cp, { body: { display_name: 'Owner' } });
  await verifyEmail(cp, first.email);
  const usersBefore = await countRows(cp, 'app_user');
  const tokensBefore = await countRows(cp, 'auth_one_time_token');
  const again = await cp.request('POST', '/v1/auth/register', { json: { email: first.email.toUpperCase(), password: 'Another-Pass-1', accept_terms: true, display_name: 'Owner' } });
  await settled(cp);
  t.equal(again.status, first.res.status);
  t.equal(again.headers.get('location'), first.res.headers.get('location'));
  t.same(Object.keys(again.body.data).sort(), Object.keys(first.res.body.data).sort(), 'same fields');
  t.match(again.body.data, { email: first.email, status: 'pending_verification', email_verified: false, roles: ['subscriber'], display_name: 'Owner' });
  t.not(again.body.data.id, first.id, 'the existing id is not revealed');
  t.equal(await countRows(cp, 'app_user'), usersBefore, 'no account created');
  t.equal(await countRows(cp, 'auth_one_time_token'), tokensBefore, 'no token issued');
  const mails = await messagesTo(cp, first.email);
  t.match(mails.at(-1)!.subject, REGISTRATION_NOTICE_SUBJECT, 'the owner is told someone tried');
  t.equal((await login(cp, first.email, PASSWORD)).res.status, 200, 'the password is unchanged');
});

t.test('a repeated registration of an address awaiting verification changes nothing and sends the verification link again, within the resend limit', async (t) => {
  const first = await register(cp, { body: { display_name: 'Owner' } });
  await settled(cp); // the first registration's verification token is issued after its response
  const stored = async () => (await query(cp, 'select password_hash, display_name, status, email_verified, version from app_user where id = ?', [first.id]))[0];
  const before = await stored();
  const usersBefore = await countRows(cp, 'app_user');
  const repeat = () => cp.request('POST', '/v1/auth/register', { json: { email: first.email, password: 'Another-Pass-1', accept_terms: true, display_name: 'Someone Else' } });
  const again = await repeat();
  t.equal(again.status, 201);
  t.not(again.body.data.id, first.id, 'the existing id is not revealed');
  t.same(await stored(), before, 'the account is unchanged: password, name, status');
  t.equal(await countRows(cp, 'app_user'), usersBefore, 'no account created');
  const mails = await messagesTo(cp, first.email);
  t.same(mails.map((m) => VERIFY_SUBJECT.test(m.subject)), [true, true], 'a second verification e-mail, no notice');
  t.match(mails[1]!.text, /Someone registered this address again\. It already has an account waiting for this confirmation, so nothing new was created: the account keeps the password chosen when the address was first registered\./);
  // The resend budget is 3 links an hour per account: two more repetitions send, the next sends nothing.
  for (let i = 0; i < 3; i++) t.equal((await repeat()).status, 201);
  t.equal((await messagesTo(cp, first.email)).length, 4, 'three repeated links an hour, then nothing');
  t.equal((await cp.request('POST', '/v1/auth/email/resend', { json: { email: first.email } })).status, 200);
  t.equal((await messagesTo(cp, first.email)).length, 4, 'resend shares the budget');
  // Only the newest link works, and it confirms the first registration's password.
  const token = await tokenFromLatest(cp, first.email, VERIFY_SUBJECT);
  t.equal((await cp.request('POST', '/v1/auth/email/verify', { json: { token } })).status, 200);
  t.equal((await login(cp, first.email, PASSWORD)).res.status, 200, 'the first registration\'s password signs in');
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: first.email, password: 'Another-Pass-1' } })).status, 401, 'the repeated one does not');
});

const long = (n: number) => 'a'.repeat(n);
const badBodies: [string, Record<string, unknown>, string][] = [
  ['missing email', { email: undefined }, 'email'],
  ['email of the wrong type', { email: 42 }, 'email'],
  ['a bad e-mail address', { email: 'not-an-address' }, 'email'],
  ['an e-mail over 254 characters', { email: `${long(250)}@example.com` }, 'email'],
  ['missing password', { password: undefined }, 'password'],
  ['password of the wrong type', { password: 1234567890 }, 'password'],
  ['a password under 10 characters', { password: 'Short-1a' }, 'password'],
  ['a password over 128 characters', { password: `Aa1!${long(125)}` }, 'password'],
  ['a password without an uppercase letter', { password: 'lower-case-42' }, 'password'],
  ['a password without a lowercase letter', { password: 'UPPER-CASE-42' }, 'password'],
  ['a password without a digit', { password: 'No-Digits-Here' }, 'password'],
  ['a password without a special character', { password: 'NoSpecial42xyz' }, 'password'],
  ['missing accept_terms', { accept_terms: undefined }, 'accept_terms'],
  ['accept_terms false', { accept_terms: false }, 'accept_terms'],
  ['accept_terms as a string', { accept_terms: 'true' }, 'accept_terms'],
  ['display_name over 100 characters', { display_name: long(101) }, 'display_name'],
  ['display_name of the wrong type', { display_name: ['Ada'] }, 'display_name'],
  ['phone over 20 characters', { phone: `+1${'2'.repeat(19)}` }, 'phone'],
  ['phone not in E.164', { phone: '0044 20 7946 0000' }, 'phone'],
  ['a locale that is not BCP 47', { locale: 'english please' }, 'locale'],
  ['country_code of 3 characters', { country_code: 'USA' }, 'country_code'],
  ['country_code ZZ, not an ISO 3166-1 alpha-2 code', { country_code: 'ZZ' }, 'country_code'],
  ['country_code xx, not an ISO 3166-1 alpha-2 code', { country_code: 'xx' }, 'country_code'],
  ['an unknown field', { role: 'admin' }, 'role'],
];

for (const [what, patch, field] of badBodies) {
  t.test(`POST /v1/auth/register refuses ${what} with 400 VALIDATION_ERROR naming ${field}, storing nothing`, async (t) => {
    const body: Record<string, unknown> = { ...valid(), ...patch };
    for (const key of Object.keys(patch)) if (patch[key] === undefined) delete body[key];
    const users = await countRows(cp, 'app_user');
    const tokens = await countRows(cp, 'auth_one_time_token');
    const res = await cp.request('POST', '/v1/auth/register', { json: body });
    t.equal(res.status, 400);
    t.equal(res.body.code, 'VALIDATION_ERROR');
    t.ok(res.body.errors?.some((e: { field: string }) => e.field === field), JSON.stringify(res.body.errors));
    t.equal(await countRows(cp, 'app_user'), users, 'no account stored');
    t.equal(await countRows(cp, 'auth_one_time_token'), tokens, 'no token stored');
    if (typeof body.email === 'string') t.same(await messagesTo(cp, body.email), [], 'no e-mail sent');
  });
}
