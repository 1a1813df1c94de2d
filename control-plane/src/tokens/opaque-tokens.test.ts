import t from 'tap';
import { createHmac, randomBytes } from 'node:crypto';
import {
  generateOpaqueToken,
  generateRefreshToken,
  generateEmailVerificationToken,
  generatePasswordResetToken,
  generateApiToken,
  isApiTokenFormat,
  generateAgentToken,
  isAgentTokenFormat,
  redactToken,
  hashToken,
  createTokenHasher,
  safeEqual,
  generateRecoveryCode,
  generateRecoveryCodes,
  normalizeRecoveryCode,
  hashRecoveryCode,
  matchRecoveryCode,
} from './opaque-tokens.ts';

const pepper = randomBytes(32).toString('hex');

t.test('opaque tokens carry 256 bits, base64url, and never repeat', async (t) => {
  for (const gen of [generateOpaqueToken, generateRefreshToken, generateEmailVerificationToken, generatePasswordResetToken]) {
    const token = gen();
    t.match(token, /^[A-Za-z0-9_-]{43}$/);
    t.equal(Buffer.from(token, 'base64url').length, 32);
  }
  const many = new Set(Array.from({ length: 1000 }, () => generateOpaqueToken()));
  t.equal(many.size, 1000);
  t.throws(() => generateOpaqueToken(8), RangeError, 'too little entropy is refused');
});

t.test('API tokens have the cdn_ prefix and are recognised by format', async (t) => {
  const token = generateApiToken();
  t.match(token, /^cdn_[A-Za-z0-9_-]{43}$/);
  t.equal(isApiTokenFormat(token), true);
  t.equal(isApiTokenFormat('eyJhbGciOiJFZERTQSJ9.e30.sig'), false);
  t.equal(isApiTokenFormat('cdn_short'), false);
  t.equal(redactToken(token), token.slice(0, 8) + '…');
  t.equal(redactToken('abcdefgh'), 'abcd…');
  t.notMatch(redactToken(token), token.slice(8, 20));
});

t.test('agent tokens have the agt_ prefix, are recognised by format and never pass for API tokens', async (t) => {
  const token = generateAgentToken();
  t.match(token, /^agt_[A-Za-z0-9_-]{43}$/);
  t.equal(Buffer.from(token.slice(4), 'base64url').length, 32);
  t.equal(isAgentTokenFormat(token), true);
  t.equal(isApiTokenFormat(token), false);
  t.equal(isAgentTokenFormat(generateApiToken()), false);
  t.equal(isAgentTokenFormat('agt_short'), false);
  t.equal(isAgentTokenFormat(token + 'x'), false);
  t.equal(redactToken(token), token.slice(0, 8) + '…');
});

t.test('hashToken is HMAC-SHA256 with the pepper, hex', async (t) => {
  const token = generateRefreshToken();
  const expected = createHmac('sha256', Buffer.from(pepper, 'hex')).update(token).digest('hex');
  t.equal(hashToken(token, pepper), expected);
  t.match(hashToken(token, pepper), /^[0-9a-f]{64}$/);
  t.not(hashToken(token, randomBytes(32).toString('hex')), expected, 'another pepper, another hash');
  t.not(hashToken(token + 'x', pepper), expected);
  t.equal(hashToken(token, Buffer.from(pepper, 'hex')), expected, 'bytes or hex');
});

t.test('weak or malformed peppers are refused', async (t) => {
  t.throws(() => hashToken('x', 'abcd'), /at least 32 bytes/);
  t.throws(() => hashToken('x', 'z'.repeat(64)), /at least 32 bytes/, 'not hex');
  t.throws(() => createTokenHasher(randomBytes(16)), /at least 32 bytes/);
});

t.test('createTokenHasher binds the pepper', async (t) => {
  const hasher = createTokenHasher(pepper);
  const token = generateApiToken();
  const stored = hasher.hash(token);
  t.equal(stored, hashToken(token, pepper));
  t.equal(hasher.matches(token, stored), true);
  t.equal(hasher.matches(generateApiToken(), stored), false);
});

t.test('safeEqual compares strings and bytes of any length', async (t) => {
  t.equal(safeEqual('abc', 'abc'), true);
  t.equal(safeEqual('abc', 'abd'), false);
  t.equal(safeEqual('abc', 'abcd'), false);
  t.equal(safeEqual('', ''), true);
  t.equal(safeEqual(Buffer.from('abc'), 'abc'), true);
  t.equal(safeEqual(new Uint8Array([1, 2]), new Uint8Array([1, 3])), false);
});

t.test('recovery codes: 10 distinct codes in xxxx-xxxx-xx format', async (t) => {
  const codes = generateRecoveryCodes();
  t.equal(codes.length, 10);
  t.equal(new Set(codes).size, 10);
  for (const code of codes) t.match(code, /^[0-9a-hjkmnp-tv-z]{4}-[0-9a-hjkmnp-tv-z]{4}-[0-9a-hjkmnp-tv-z]{2}$/);
  t.equal(generateRecoveryCodes(3).length, 3);
  // Every symbol of the alphabet shows up over enough draws (no bias towards a subset).
  const seen = new Set(Array.from({ length: 400 }, generateRecoveryCode).join('').replace(/-/g, ''));
  t.equal(seen.size, 32);
});

t.test('recovery code input is normalised', async (t) => {
  t.equal(normalizeRecoveryCode('7KQ2-M9XD-4H'), '7kq2-m9xd-4h');
  t.equal(normalizeRecoveryCode(' 7kq2 m9xd 4h '), '7kq2-m9xd-4h');
  t.equal(normalizeRecoveryCode('7kq2m9xd4h'), '7kq2-m9xd-4h');
  t.equal(normalizeRecoveryCode('ab0o-1lI1-zz'), 'ab00-1111-zz', 'Crockford look-alikes');
  t.equal(normalizeRecoveryCode('7kq2-m9xd-4'), null, 'too short');
  t.equal(normalizeRecoveryCode('7kq2-m9xd-4hh'), null, 'too long');
  t.equal(normalizeRecoveryCode('7kq2-m9xd-4u'), null, 'u is not in the alphabet');
});

t.test('recovery codes verify by hash, each at its own index', async (t) => {
  const codes = generateRecoveryCodes();
  const hashes = codes.map((c) => hashRecoveryCode(c, pepper));
  t.equal(new Set(hashes).size, 10);
  t.equal(matchRecoveryCode(codes[3]!, hashes, pepper), 3);
  t.equal(matchRecoveryCode(codes[9]!.toUpperCase().replace(/-/g, ' '), hashes, pepper), 9);
  t.equal(matchRecoveryCode(generateRecoveryCode(), hashes, pepper), -1);
  t.equal(matchRecoveryCode('not a code', hashes, pepper), -1);
  t.equal(matchRecoveryCode(codes[0]!, hashes, randomBytes(32)), -1, 'wrong pepper');
  t.equal(matchRecoveryCode(codes[0]!, [], pepper), -1);
  t.not(hashRecoveryCode(codes[0]!, pepper), hashToken(codes[0]!, pepper), 'domain-separated from other tokens');
  t.throws(() => hashRecoveryCode('nope', pepper), RangeError);
});
