// The prefix-token format as documented (docs/guides/protecting-endpoints.md,
// "Prefix tokens"): the worked example's values (which `openssl dgst -sha256
// -hmac` reproduces), parsing, what a pattern covers, and the patterns that
// cannot be signed.
import t from 'tap';
import { createHmac } from 'node:crypto';
import { normalizePath } from '../match/path.ts';
import { aclCovers, aclProblem, cookiePath, isPrefixToken, parsePrefixToken, pathWithToken, prefixTokenCookie, signPrefixToken } from './prefix-token.ts';
import { signPath } from './signed-url.ts';

const secret = 'example-secret-for-the-docs-only-0123456789';

t.test('the worked example of the documentation', async (t) => {
  t.equal(signPrefixToken({ secret, acl: '/videos/123/*', expires: 1767225600 }), 'exp=1767225600~acl=L3ZpZGVvcy8xMjMvKg~hmac=t9kmu_0Cx9vFS_gHS6F66AcF_gxdxe3scm7BmDfcXB0');
  t.equal(
    signPrefixToken({ secret, acl: '/videos/123/*', expires: 1767225600, start: 1767222000, ip: '203.0.113.7' }),
    'st=1767222000~exp=1767225600~acl=L3ZpZGVvcy8xMjMvKg~ip=203.0.113.7~hmac=XExzho3AjsMFrHTnQiCjt6iEO6YTO1yIs3kP1-SDWik',
  );
});

t.test('the signature is the base64url HMAC of the payload, the text before "~hmac="', async (t) => {
  const token = signPrefixToken({ secret, acl: '/v/*', expires: 42, algorithm: 'HMAC-SHA512' });
  const [payload, hmac] = token.split('~hmac=');
  t.equal(payload, `exp=42~acl=${Buffer.from('/v/*').toString('base64url')}`);
  t.equal(hmac, createHmac('sha512', secret).update(payload!).digest('base64url'));
  t.equal(hmac!.length, 86);
});

t.test('parsing gives back what was signed; anything else is not a token', async (t) => {
  const token = signPrefixToken({ secret, acl: '/videos/123/*', expires: 1767225600, start: 1767222000, ip: '2001:db8::7' });
  t.same(parsePrefixToken(token), {
    payload: token.slice(0, token.indexOf('~hmac=')), start: 1767222000, expires: 1767225600, acl: '/videos/123/*', ip: '2001:db8::7',
    hmac: token.slice(token.indexOf('~hmac=') + 6),
  });
  t.ok(isPrefixToken(token));
  const plain = signPrefixToken({ secret, acl: '/a', expires: 1 });
  t.equal(parsePrefixToken(plain)?.start, null);
  t.equal(parsePrefixToken(plain)?.ip, null);
  for (const bad of [
    plain.slice(0, -1), // a signature of the wrong length
    plain.replace('exp=1', 'exp=x'),
    `${plain}~x=1`,
    plain.replace('~acl=', '~acl=~'),
    `st=1~${plain.replace('exp=1~', '')}`, // no expiry
    plain.replace('exp=1~', 'exp=1~st=0~'), // fields out of order
    `exp=1~acl=${Buffer.from('/a/../b').toString('base64url')}~hmac=${'a'.repeat(43)}`, // a pattern the edge never normalises to
  ]) t.equal(parsePrefixToken(bad), null, bad);
  const url = signPath({ path: '/a', expires: 1, secret });
  t.notOk(isPrefixToken(new URLSearchParams(url.split('?')[1]).get('token')!), 'a signed URL\'s token is never taken for a prefix token');
});

t.test('a pattern covers its prefix or its one path', async (t) => {
  t.ok(aclCovers('/videos/123/*', '/videos/123/index.m3u8'));
  t.ok(aclCovers('/videos/123/*', '/videos/123/hd/seg-1.ts'));
  t.notOk(aclCovers('/videos/123/*', '/videos/124/index.m3u8'));
  t.notOk(aclCovers('/videos/123/*', '/videos/123'));
  t.notOk(aclCovers('/videos/123/*', '/Videos/123/a'), 'paths are case-sensitive');
  t.ok(aclCovers('/videos/123/index.m3u8', '/videos/123/index.m3u8'));
  t.notOk(aclCovers('/videos/123/index.m3u8', '/videos/123/index.m3u8x'));
});

t.test('patterns the edge could never match are refused at signing', async (t) => {
  for (const acl of ['videos/*', '/videos/*/a', '/videos/../*', '/videos/./a', '/a b/*', '/a?b', '/a%2fb', '/a%2Fb/*', '/%7Euser/*', '/a%41']) {
    t.not(aclProblem(acl), null, acl);
    t.throws(() => signPrefixToken({ secret, acl, expires: 1 }), acl);
  }
  for (const acl of ['/videos/123/*', '/videos/a%20b/*', '/*', '/a.mp4', '/videos/123*', '/~user/*']) {
    t.equal(aclProblem(acl), null, acl);
    t.equal(normalizePath(acl.replace(/\*$/, '')), acl.replace(/\*$/, ''), `${acl} is a normalised path`);
  }
  t.throws(() => signPrefixToken({ secret, acl: '/a/*', expires: -1 }));
  t.throws(() => signPrefixToken({ secret, acl: '/a/*', expires: 1, ip: 'not an address' }));
});

t.test('the cookie and the path-segment forms', async (t) => {
  t.equal(cookiePath('/videos/123/*'), '/videos/123/');
  t.equal(cookiePath('/videos/123*'), '/videos/');
  t.equal(cookiePath('/videos/a.mp4'), '/videos/a.mp4');
  t.equal(prefixTokenCookie('token', 'exp=1~x', '/videos/123/*', 1767225600), 'token=exp=1~x; Expires=Thu, 01 Jan 2026 00:00:00 GMT; Path=/videos/123/; Secure; HttpOnly; SameSite=None');
  t.equal(pathWithToken('/videos/123/index.m3u8', 'token', 'exp=1~x'), '/videos/123/token=exp=1~x/index.m3u8');
  const token = signPrefixToken({ secret, acl: '/videos/123/*', expires: 1767225600, ip: '2001:db8::7' });
  t.equal(normalizePath(pathWithToken('/videos/123/index.m3u8', 'token', token)), pathWithToken('/videos/123/index.m3u8', 'token', token), 'a token is a path segment as it stands');
});
