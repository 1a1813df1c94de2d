import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, countRows, createLoggedInUser, createUserDirect, messagesTo, register, uniqueEmail, type TestAccount } from '../../../test/support/auth.ts';
import type { TestResponse } from '../../../test/support/control-plane.ts';

// Real per-IP limits (multiplier 1); each test speaks from its own address through X-Forwarded-For.
const cp = await startTestControlPlane(t, { env: { RATE_LIMIT_IP_MULTIPLIER: '1', RATE_LIMIT_PER_MINUTE: '0', TRUST_PROXY: 'true' } });
let octet = 0;
const newIp = () => ({ 'x-forwarded-for': `198.51.100.${++octet}` });

function assertLimited(t: Pick<typeof import('tap').t, 'equal' | 'ok'>, res: TestResponse, maxWindowSeconds: number) {
  t.equal(res.status, 429);
  t.equal(res.body.code, 'RATE_LIMITED');
  const retryAfter = Number(res.headers.get('retry-after'));
  t.ok(retryAfter >= 1 && retryAfter <= maxWindowSeconds, `Retry-After ${retryAfter}`);
}

t.test('login: 10 attempts per account per 15 minutes, whatever the address', async (t) => {
  const user = await createUserDirect(cp);
  for (let i = 0; i < 10; i++) {
    const res = await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: 'Wrong-Password-1' }, headers: newIp() });
    t.equal(res.status, 401, `attempt ${i + 1}`);
  }
  const limited = await cp.request('POST', '/v1/auth/login', { json: { email: user.email.toUpperCase(), password: user.password }, headers: newIp() });
  assertLimited(t, limited, 900);
  t.equal(await countRows(cp, 'auth_session', 'user_id = ?', [user.id]), 0, 'even the right password is refused');
  const other = await createUserDirect(cp);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: other.email, password: other.password }, headers: newIp() })).status, 200, 'other accounts unaffected');
});

t.test('login: 30 attempts per client address per 15 minutes', async (t) => {
  const ip = newIp();
  for (let i = 0; i < 30; i++) {
    const res = await cp.request('POST', '/v1/auth/login', { json: { email: uniqueEmail('ip'), password: '' }, headers: ip });
    t.equal(res.status, 400);
  }
  const user = await createUserDirect(cp);
  assertLimited(t, await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password }, headers: ip }), 900);
  t.equal((await cp.request('POST', '/v1/auth/login', { json: { email: user.email, password: user.password }, headers: newIp() })).status, 200, 'another address may');
});

t.test('register: 10 per client address per hour', async (t) => {
  const ip = newIp();
  for (let i = 0; i < 10; i++) {
    t.equal((await cp.request('POST', '/v1/auth/register', { json: { email: 'bad' }, headers: ip })).status, 400);
  }
  const users = await countRows(cp, 'app_user');
  const email = uniqueEmail('late');
  const res = await cp.request('POST', '/v1/auth/register', { json: { email, password: 'Correct-Horse-42', accept_terms: true }, headers: ip });
  assertLimited(t, res, 3600);
  t.equal(await countRows(cp, 'app_user'), users, 'nothing stored');
  t.same(await messagesTo(cp, email), [], 'nothing sent');
});

t.test('forgot password: 5 links per account per hour (then 200 and nothing sent), 10 requests per address per hour', async (t) => {
  const user = await createUserDirect(cp);
  const answers: TestResponse[] = [];
  for (let i = 0; i < 7; i++) answers.push(await cp.request('POST', '/v1/auth/password/forgot', { json: { email: user.email.toUpperCase() }, headers: newIp() }));
  t.same(answers.map((r) => r.status), [200, 200, 200, 200, 200, 200, 200], '200 always');
  t.same(answers.map((r) => r.body), answers.map(() => answers[0]!.body), 'the same answer past the budget');
  t.equal((await messagesTo(cp, user.email)).length, 5, 'no sixth e-mail');

  const ip = newIp();
  for (let i = 0; i < 10; i++) t.equal((await cp.request('POST', '/v1/auth/password/forgot', { json: { email: `not-an-address-${i}` }, headers: ip })).status, 400);
  assertLimited(t, await cp.request('POST', '/v1/auth/password/forgot', { json: { email: uniqueEmail() }, headers: ip }), 3600);
});

t.test('regression: resend verification answered 429 after three requests an hour where document 2 says 200 always; 3 links per account per hour, then 200 and nothing sent', async (t) => {
  const { email } = await register(cp, { headers: newIp() });
  const answers: TestResponse[] = [];
  for (let i = 0; i < 5; i++) answers.push(await cp.request('POST', '/v1/auth/email/resend', { json: { email }, headers: newIp() }));
  t.same(answers.map((r) => r.status), [200, 200, 200, 200, 200], '200 always');
  t.same(answers.map((r) => r.body), answers.map(() => answers[0]!.body), 'the same answer past the budget');
  t.equal((await messagesTo(cp, email)).length, 4, 'the registration mail and three resends: the limit holds');

  const ip = newIp();
  for (let i = 0; i < 20; i++) t.equal((await cp.request('POST', '/v1/auth/email/resend', { json: { email: `x${i}` }, headers: ip })).status, 400);
  assertLimited(t, await cp.request('POST', '/v1/auth/email/resend', { json: { email: uniqueEmail() }, headers: ip }), 3600);
});

t.test('TOTP verification: 5 attempts per account per 5 minutes across the MFA operations', async (t) => {
  const a: TestAccount = await createLoggedInUser(cp, {});
  const paths = ['/v1/me/auth/mfa/verify', '/v1/me/auth/mfa/disable', '/v1/me/auth/mfa/recovery-codes/regenerate', '/v1/me/auth/mfa/verify', '/v1/me/auth/mfa/verify'];
  for (const path of paths) {
    const res = await cp.request('POST', path, { json: { totp_code: '123456' }, headers: bearer(a.accessToken, newIp()) });
    t.equal(res.status, 409, `${path} counted (MFA is not set up)`);
  }
  assertLimited(t, await cp.request('POST', '/v1/me/auth/mfa/disable', { json: { totp_code: '123456' }, headers: bearer(a.accessToken, newIp()) }), 300);
  const b = await createLoggedInUser(cp);
  t.equal((await cp.request('POST', '/v1/me/auth/mfa/verify', { json: { totp_code: '123456' }, headers: bearer(b.accessToken) })).status, 409, 'another account has its own budget');
});
