import t from 'tap';
import * as jose from 'jose';
import { KeyRing, TokenVerificationError, type KeyRingOptions } from './signing-keys.ts';

const base: KeyRingOptions = { issuer: 'https://api.example.test', audience: 'streaming-api' };

/** A ring with a hand-driven clock (ms). */
async function ringAt(startMs: number, extra: Partial<KeyRingOptions> = {}) {
  const clock = { ms: startMs };
  const ring = await KeyRing.generate({ ...base, ...extra, now: () => clock.ms });
  return { ring, clock };
}

const T0 = Date.UTC(2030, 0, 1);
// Not inline literals, so tap's ErrorMatch type accepts the extra `reason` field.
const invalid = { name: 'TokenVerificationError', reason: 'invalid' };
const expired = { name: 'TokenVerificationError', reason: 'expired' };

t.test('sign puts kid, alg and typ in the header; verify returns typed claims', async (t) => {
  const { ring } = await ringAt(T0);
  const token = await ring.sign({ sub: 'user-1', sid: 'sess-1', roles: ['subscriber'] }, { expiresInSeconds: 900 });
  const header = jose.decodeProtectedHeader(token);
  t.same(header, { alg: 'EdDSA', kid: ring.keys()[0]!.kid, typ: 'at+jwt' });
  const claims = await ring.verify(token);
  t.equal(claims.sub, 'user-1');
  t.equal(claims.sid, 'sess-1');
  t.same(claims.roles, ['subscriber']);
  t.equal(claims.iss, base.issuer);
  t.equal(claims.aud, base.audience);
  t.equal(claims.iat, T0 / 1000);
  t.equal(claims.exp, T0 / 1000 + 900);
  t.match(claims.jti, /^[0-9a-f-]{36}$/);
});

t.test('reserved claims and bad lifetimes are refused at signing', async (t) => {
  const { ring } = await ringAt(T0);
  await t.rejects(ring.sign({ sub: 'u', exp: 1 }, { expiresInSeconds: 60 }), /exp is set by the key ring/);
  await t.rejects(ring.sign({ sub: 'u', aud: 'other' }, { expiresInSeconds: 60 }), /aud/);
  await t.rejects(ring.sign({ sub: '' }, { expiresInSeconds: 60 }), /sub/);
  await t.rejects(ring.sign({ sub: 'u' }, { expiresInSeconds: 0 }), RangeError);
});

t.test('expired tokens are refused, including from the cache', async (t) => {
  const { ring, clock } = await ringAt(T0);
  const token = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
  await ring.verify(token);
  t.equal(ring.cacheSize, 1, 'verified token is cached');
  clock.ms = T0 + 59_999;
  t.equal((await ring.verify(token)).sub, 'u', 'still valid 1 ms before exp');
  clock.ms = T0 + 60_000;
  const err = await ring.verify(token).catch((e: unknown) => e);
  t.type(err, TokenVerificationError);
  t.equal((err as TokenVerificationError).reason, 'expired');
  t.equal(ring.cacheSize, 0, 'evicted');
});

t.test('clock tolerance is honoured on both paths', async (t) => {
  const { ring, clock } = await ringAt(T0, { clockToleranceSeconds: 5 });
  const token = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
  await ring.verify(token);
  clock.ms = T0 + 64_000;
  t.equal((await ring.verify(token)).sub, 'u');
  clock.ms = T0 + 65_001;
  await t.rejects(ring.verify(token), expired);
});

t.test('issuer, audience, typ, signature and algorithm are all checked', async (t) => {
  const { ring } = await ringAt(Date.now());
  const token = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
  const stored = await ring.exportPrivate();
  const otherIss = await KeyRing.import(stored, { ...base, issuer: 'https://evil.test' });
  const otherAud = await KeyRing.import(stored, { ...base, audience: 'cdn-edge' });
  await t.rejects(otherIss.verify(token), invalid, 'issuer');
  await t.rejects(otherAud.verify(token), invalid, 'audience');

  const stepUp = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60, typ: 'step-up+jwt' });
  await t.rejects(ring.verify(stepUp), invalid, 'a step-up token is not an access token');
  t.equal((await ring.verify(stepUp, { typ: 'step-up+jwt' })).sub, 'u');
  await t.rejects(ring.verify(stepUp), invalid, 'typ still checked once cached');
  t.equal((await ring.verify(token)).sub, 'u');
  await t.rejects(ring.verify(token, { typ: 'step-up+jwt' }), invalid, 'and the other way round');

  const [h, p, s] = token.split('.');
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), sub: 'admin' })).toString('base64url');
  await t.rejects(ring.verify(`${h}.${forged}.${s}`), invalid, 'payload tampering');
  const flipped = s!.slice(0, -2) + (s!.endsWith('AA') ? 'BB' : 'AA');
  await t.rejects(ring.verify(`${h}.${p}.${flipped}`), invalid, 'signature tampering');

  const unsigned = new jose.UnsecuredJWT({ sub: 'admin', jti: 'x' }).setIssuer(base.issuer).setAudience(base.audience).setIssuedAt().setExpirationTime('5m').encode();
  await t.rejects(ring.verify(unsigned), invalid, 'alg none');

  // A token signed by a key the ring does not know, with a kid copied from the ring.
  const stranger = await jose.generateKeyPair('EdDSA');
  const spoof = await new jose.SignJWT({ sub: 'admin', jti: 'x' })
    .setProtectedHeader({ alg: 'EdDSA', kid: ring.keys()[0]!.kid, typ: 'at+jwt' })
    .setIssuer(base.issuer).setAudience(base.audience).setIssuedAt().setExpirationTime('5m')
    .sign(stranger.privateKey);
  await t.rejects(ring.verify(spoof), invalid, 'foreign key under a known kid');
  await t.rejects(ring.verify('not-a-jwt'), invalid);
});

t.test('rotate: new tokens use the new key, old tokens verify until the old key is retired', async (t) => {
  const { ring, clock } = await ringAt(T0);
  const oldKid = ring.keys()[0]!.kid;
  const oldToken = await ring.sign({ sub: 'u' }, { expiresInSeconds: 900 });
  await ring.verify(oldToken); // cached

  clock.ms = T0 + 1000;
  const info = await ring.rotate();
  t.equal(info.status, 'active');
  t.not(info.kid, oldKid);
  t.same(ring.keys().map((k) => [k.kid, k.status]), [[info.kid, 'active'], [oldKid, 'retiring']]);
  t.same(ring.keys()[1]!.retiringAt, new Date(T0 + 1000));

  const newToken = await ring.sign({ sub: 'u' }, { expiresInSeconds: 3600 });
  t.equal(jose.decodeProtectedHeader(newToken).kid, info.kid);
  t.equal((await ring.verify(oldToken)).sub, 'u', 'retiring key still verifies');
  t.same(ring.jwks().keys.map((k) => k.kid), [info.kid, oldKid]);

  clock.ms = T0 + 1000 + 899_000;
  t.same(ring.retireExpired(900), [], 'not yet');
  clock.ms = T0 + 1000 + 900_000;
  t.same(ring.retireExpired(900), [oldKid]);
  await t.rejects(ring.verify(oldToken), invalid, 'retired key refuses even a cached token');
  t.same(ring.jwks().keys.map((k) => k.kid), [info.kid], 'retired key leaves the JWKS');
  t.equal((await ring.verify(newToken)).sub, 'u');

  t.throws(() => ring.retire(info.kid), /only active key/);
  t.throws(() => ring.remove(info.kid), /only retired/);
  ring.remove(oldKid);
  t.equal(ring.keys().length, 1);
});

t.test('concurrent rotations leave exactly one active key', async (t) => {
  const { ring } = await ringAt(T0);
  await Promise.all([ring.rotate(), ring.rotate(), ring.rotate()]);
  t.same(ring.keys().map((k) => k.status), ['active', 'retiring', 'retiring', 'retiring']);
  const token = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
  t.equal(jose.decodeProtectedHeader(token).kid, ring.keys()[0]!.kid, 'signs with the newest key');
});

t.test('jwks exposes public parts only and interoperates with a standard JWKS verifier', async (t) => {
  for (const alg of ['EdDSA', 'ES256'] as const) {
    const { ring } = await ringAt(Date.now(), { alg });
    const jwks = ring.jwks();
    t.equal(jwks.keys.length, 1);
    const [key] = jwks.keys;
    t.notOk('d' in key!, `${alg}: no private part`);
    t.equal(key!.use, 'sig');
    t.equal(key!.alg, alg);
    t.equal(key!.kid, await jose.calculateJwkThumbprint(key!), 'kid is the RFC 7638 thumbprint');
    const token = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
    // What an edge node or another service would do with /.well-known/jwks.json.
    const { payload } = await jose.jwtVerify(token, jose.createLocalJWKSet(JSON.parse(JSON.stringify(jwks))), {
      issuer: base.issuer,
      audience: base.audience,
    });
    t.equal(payload.sub, 'u');
  }
});

t.test('export and import round trip keeps keys, statuses and verification', async (t) => {
  const { ring } = await ringAt(Date.now());
  const before = await ring.sign({ sub: 'u' }, { expiresInSeconds: 60 });
  await ring.rotate();
  const stored = JSON.parse(JSON.stringify(await ring.exportPrivate()));
  t.equal(stored.length, 2);
  t.ok(stored.every((s: { private_jwk: jose.JWK }) => typeof s.private_jwk.d === 'string'));

  const restored = await KeyRing.import(stored, base);
  t.same(restored.keys(), ring.keys());
  t.equal((await restored.verify(before)).sub, 'u', 'token from the retiring key');
  const after = await restored.sign({ sub: 'v' }, { expiresInSeconds: 60 });
  t.equal(jose.decodeProtectedHeader(after).kid, ring.keys()[0]!.kid, 'signs with the restored active key');
  t.equal((await ring.verify(after)).sub, 'v');
  t.same(await restored.exportPrivate(), stored, 're-export is identical');

  const swapped = structuredClone(stored);
  swapped[0].kid = stored[1].kid;
  await t.rejects(KeyRing.import(swapped, base), /does not match its kid/);
});

t.test('the verify cache is used, and bounded', async (t) => {
  let calls = 0;
  const { KeyRing: CountingRing } = await t.mockImport<typeof import('./signing-keys.ts')>('./signing-keys.ts', {
    jose: {
      ...jose,
      jwtVerify: (...args: Parameters<typeof jose.jwtVerify>) => {
        calls++;
        return jose.jwtVerify(...args);
      },
    },
  });
  const ring = await CountingRing.generate({ ...base, cacheMax: 2 });
  const tokens = await Promise.all([1, 2, 3].map((i) => ring.sign({ sub: `u${i}` }, { expiresInSeconds: 60 })));
  await ring.verify(tokens[0]!);
  await ring.verify(tokens[0]!);
  await ring.verify(tokens[0]!);
  t.equal(calls, 1, 'one signature check for three verifications');
  await ring.verify(tokens[1]!);
  await ring.verify(tokens[2]!);
  t.equal(ring.cacheSize, 2, 'bounded by cacheMax');
  await ring.verify(tokens[0]!);
  t.equal(calls, 4, 'the least recently used token was evicted and checked again');

  const claims = await ring.verify(tokens[2]!);
  (claims.roles as unknown) = ['superadmin'];
  t.equal((await ring.verify(tokens[2]!)).roles, undefined, 'callers cannot poison the cache');
});
