import t from 'tap';
import { createLocalJWKSet, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify, SignJWT, decodeJwt } from 'jose';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createLoggedInUser, login, RELAXED_LIMITS } from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const account = await createLoggedInUser(cp);

t.test('GET /.well-known/jwks.json serves the public key of issued tokens, and only public parts', async (t) => {
  const res = await cp.request('GET', '/.well-known/jwks.json');
  t.equal(res.status, 200);
  t.match(res.headers.get('cache-control'), /public/);
  const { kid } = decodeProtectedHeader(account.accessToken);
  const key = res.body.keys.find((k: { kid: string }) => k.kid === kid);
  t.ok(key, 'the kid of an issued token is listed');
  t.match(key, { use: 'sig', alg: String });
  for (const k of res.body.keys) for (const secret of ['d', 'p', 'q', 'dp', 'dq', 'qi']) t.notOk(secret in k, `no private member ${secret}`);
  // A standard JOSE client can verify the token from the published set.
  const { payload } = await jwtVerify(account.accessToken, createLocalJWKSet(res.body));
  t.equal(payload.sub, account.id);
});

t.test('rotating the signing key keeps old tokens valid; new tokens carry the new kid', async (t) => {
  const oldKid = decodeProtectedHeader(account.accessToken).kid;
  const newKid = await cp.app.tokens.rotateSigningKey(cp.database.db.orm.em.fork());
  t.not(newKid, oldKid);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(account.accessToken) })).status, 200, 'a token of the previous key still works');
  const fresh = await login(cp, account.email, account.password);
  t.equal(decodeProtectedHeader(fresh.accessToken).kid, newKid);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(fresh.accessToken) })).status, 200);
  const refreshed = await cp.request('POST', '/v1/auth/refresh', { headers: { cookie: `refresh_token=${account.refreshToken}` } });
  t.equal(decodeProtectedHeader(refreshed.body.data.access_token).kid, newKid, 'refresh signs with the new key');
  const jwks = (await cp.request('GET', '/.well-known/jwks.json')).body;
  const kids = jwks.keys.map((k: { kid: string }) => k.kid);
  t.ok(kids.includes(oldKid) && kids.includes(newKid), 'both keys are published');
  const [row] = await cp.database.db.orm.em.fork().getConnection().execute(`select count(*)::int as n from auth_jwt_signing_key where status = 'active'`);
  t.equal(row.n, 1, 'exactly one active key');
});

t.test('a token signed by a key not in the set is refused even with a known kid', async (t) => {
  const { kid } = decodeProtectedHeader(account.accessToken);
  const claims = decodeJwt(account.accessToken);
  const { privateKey, publicKey } = await generateKeyPair('EdDSA', { extractable: true });
  t.ok(await exportJWK(publicKey));
  const forged = await new SignJWT({ ...claims, roles: ['superadmin'] })
    .setProtectedHeader({ alg: 'EdDSA', kid, typ: 'at+jwt' })
    .sign(privateKey);
  const res = await cp.request('GET', '/v1/users/me', { headers: bearer(forged) });
  t.equal(res.status, 401);
  const none = `${Buffer.from(JSON.stringify({ alg: 'none', kid })).toString('base64url')}.${account.accessToken.split('.')[1]}.`;
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(none) })).status, 401, 'alg none refused');
});

t.test('a step-up token is not accepted as an access token', async (t) => {
  const stepUp = await cp.app.tokens.issueStepUpToken(account.id, decodeJwt(account.accessToken).sid as string);
  t.equal((await cp.request('GET', '/v1/users/me', { headers: bearer(stepUp.step_up_token) })).status, 401);
});
