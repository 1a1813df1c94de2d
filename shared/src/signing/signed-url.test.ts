// The signed-URL algorithm as documented (docs/guides/protecting-endpoints.md,
// "Signed URLs", and the signing-key operations' OpenAPI text): the worked
// example's values, which `openssl dgst -sha256 -hmac` reproduces, and how
// paths, queries and addresses enter it.
import t from 'tap';
import { createHmac } from 'node:crypto';
import { canonicalClientIp, canonicalString, signPath, urlSignature } from './signed-url.ts';

const secret = 'example-secret-for-the-docs-only-0123456789';

t.test('the worked example of the documentation', async (t) => {
  t.equal(canonicalString('/videos/intro.mp4', 1767225600, null), '/videos/intro.mp4\n1767225600');
  t.equal(signPath({ path: '/videos/intro.mp4', expires: 1767225600, secret }), '/videos/intro.mp4?expires=1767225600&token=prz1uB7enDKQNv6UWL8vAT2n4ELDSOobiUIcf1jCES4');
  t.equal(
    signPath({ path: '/videos/intro.mp4', expires: 1767225600, secret, clientIp: '203.0.113.7' }),
    '/videos/intro.mp4?expires=1767225600&token=203.0.113.7~jT6OZGi4mgqCbuBYP_exPJpJb1Ses3z1hceKt_9O1uI',
  );
  t.equal(
    signPath({ path: '/videos/intro.mp4?quality=hd', expires: 1767225600, secret, algorithm: 'HMAC-SHA512' }),
    '/videos/intro.mp4?quality=hd&expires=1767225600&token=74Qa3YYdOEe4NB36qQSZvjYKRGrM6c2E0ykF2qznlhWZCvvm736G6J4KxTyWtbTK9Gcg3-Et1RtRXzmC7PuS4A',
  );
});

t.test('the signature is the base64url HMAC of the canonical string, nothing more', async (t) => {
  const expected = createHmac('sha512', secret).update('/a\n42\n2001:db8::1').digest('base64url');
  t.equal(urlSignature('HMAC-SHA512', secret, '/a', 42, '2001:db8::1'), expected);
  t.equal(urlSignature('HMAC-SHA256', secret, '/a', 42, null).length, 43);
  t.equal(urlSignature('HMAC-SHA512', secret, '/a', 42, null).length, 86);
});

t.test('the path is signed as the edge normalises it; parameter names are configurable', async (t) => {
  const a = signPath({ path: '/videos/./x/../%7Euser/a%3fb', expires: 1, secret, tokenParam: 'sig', expiresParam: 'exp' });
  const b = signPath({ path: '/videos/~user/a%3Fb', expires: 1, secret, tokenParam: 'sig', expiresParam: 'exp' });
  t.equal(a, b);
  t.match(a, /^\/videos\/~user\/a%3Fb\?exp=1&sig=[A-Za-z0-9_-]{43}$/);
  t.throws(() => signPath({ path: '/a/..;/b', expires: 1, secret }), /not a path the edge accepts/);
  t.throws(() => signPath({ path: '/a%2fb', expires: 1, secret }), /not a path the edge accepts/, 'an encoded "/" is refused by the edge too');
  t.throws(() => signPath({ path: '/a', expires: -1, secret }), /expires/);
  t.throws(() => signPath({ path: '/a', expires: 1, secret, clientIp: 'nope' }), /not an IP address/);
});

t.test('client addresses are signed in canonical form (IPv6 compact, IPv4-mapped as IPv4)', async (t) => {
  t.equal(canonicalClientIp('2001:DB8:0:0:0:0:0:1'), '2001:db8::1');
  t.equal(canonicalClientIp('::ffff:203.0.113.7'), '203.0.113.7');
  t.equal(canonicalClientIp('bogus'), null);
  t.equal(
    signPath({ path: '/a', expires: 9, secret, clientIp: '::ffff:203.0.113.7' }),
    signPath({ path: '/a', expires: 9, secret, clientIp: '203.0.113.7' }),
  );
  t.match(signPath({ path: '/a', expires: 9, secret, clientIp: '2001:db8::1' }), /token=2001%3Adb8%3A%3A1~/, 'the address is percent-encoded in the query');
});
