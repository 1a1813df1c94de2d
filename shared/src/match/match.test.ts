import t from 'tap';
import { compilePathGlob, compilePathGlobs, globLiteralPrefix, pathGlobProblem } from './glob.ts';
import { compileHostPattern, compileHostPatterns, hostPatternProblem, normalizeHost } from './host.ts';
import { addressClass, compileCidr, isPrivateAddress, isValidCidr, originAddressAllowed } from './cidr.ts';
import { formatAuthority, parseAuthority } from './authority.ts';
import { normalizePath } from './path.ts';

t.test('path globs', async (t) => {
  t.ok(compilePathGlob('/videos/*')('/videos/a.mp4'));
  t.ok(compilePathGlob('/videos/*')('/videos/x/y/seg1.ts'), 'trailing /* means everything under');
  t.notOk(compilePathGlob('/videos/*')('/images/a.png'));
  t.ok(compilePathGlob('/a/*.m3u8')('/a/index.m3u8'));
  t.notOk(compilePathGlob('/a/*.m3u8')('/a/index.ts'));
  t.ok(compilePathGlob('/**/*.ts')('/x/y/z.ts'));
  t.ok(compilePathGlob('/exact')('/exact'));
  t.notOk(compilePathGlob('/exact')('/exact/more'));
  t.ok(compilePathGlob('/*.{jpg,png}')('/a.png'));
  t.ok(compilePathGlob('/api/?')('/api/x'));
  t.ok(compilePathGlobs([])('/anything'), 'empty list matches all');
  t.ok(compilePathGlobs(['/a/*', '/b/*'])('/b/c'));
  t.notOk(compilePathGlobs(['/a/*', '/b/*'])('/c/d'));
  t.ok(compilePathGlob('/*')('/.hidden'), 'dot files match');
  t.equal(globLiteralPrefix('/videos/abc*'), '/videos/abc');
  t.equal(globLiteralPrefix('/plain'), '/plain');
});

t.test('host wildcards', async (t) => {
  t.equal(normalizeHost('WWW.Example.COM:8080'), 'www.example.com');
  t.equal(normalizeHost('example.com.'), 'example.com');
  t.equal(normalizeHost('[::1]:80'), '[::1]');
  const star = compileHostPattern('*.example.com');
  t.ok(star('a.example.com'));
  t.ok(star('a.b.example.com'));
  t.notOk(star('example.com'), 'apex is not matched by a leading star');
  t.notOk(star('badexample.com'));
  t.ok(compileHostPattern('Example.com')('example.com'));
  t.ok(compileHostPattern('*')('anything'));
  const many = compileHostPatterns(['a.com', '*.b.com']);
  t.ok(many('a.com'));
  t.ok(many('x.b.com'));
  t.notOk(many('b.com'));
  t.ok(compileHostPatterns([])('whatever'));
});

t.test('CIDR', async (t) => {
  const m = compileCidr('10.0.0.0/8');
  t.ok(m('10.1.2.3'));
  t.notOk(m('11.0.0.1'));
  t.ok(m('::ffff:10.0.0.1'), 'v4-mapped v6 is matched as v4');
  t.notOk(m('not-an-ip'));
  t.ok(compileCidr('2001:db8::/32')('2001:db8::1'));
  t.notOk(compileCidr('2001:db8::/32')('10.0.0.1'));
  t.ok(compileCidr('192.0.2.7')('192.0.2.7'), 'bare address is /32');
  t.ok(isValidCidr('1.2.3.0/24'));
  t.notOk(isValidCidr('1.2.3.0/33'));
  t.notOk(isValidCidr('nope'));
});

t.test('private address guard', async (t) => {
  for (const a of ['127.0.0.1', '10.0.0.1', '172.16.5.4', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', 'fe80::1', 'fc00::1', '::ffff:127.0.0.1', '::', '224.0.0.1', 'garbage']) {
    t.ok(isPrivateAddress(a), `${a} is private`);
  }
  for (const a of ['93.184.216.34', '8.8.8.8', '2606:4700::1111']) {
    t.notOk(isPrivateAddress(a), `${a} is public`);
  }
});

t.test('address classes and the origin guard: ssrf_protection: false alone opens nothing', async (t) => {
  for (const a of ['127.0.0.1', '10.0.0.1', '172.16.5.4', '192.168.1.1', '100.64.0.1', '::1', 'fc00::1', 'fd12::1', '::ffff:10.1.2.3']) t.equal(addressClass(a), 'private', a);
  for (const a of ['169.254.169.254', 'fe80::1', '100.100.100.200', 'fd00:ec2::254', '0.0.0.0', '::', '224.0.0.1', '255.255.255.255', '192.0.2.1', '2002::1', '64:ff9b::a00:1', 'garbage']) t.equal(addressClass(a), 'special', a);
  for (const a of ['8.8.8.8', '2606:4700::1111']) t.equal(addressClass(a), 'public', a);
  // Regression: IPv4-compatible IPv6 (::/96) was public unicast to the classifier, so `http://[::127.0.0.1]` (host ::7f00:1) passed.
  // Every form that embeds an IPv4 address is special, whatever address it carries; the mapped form is judged as its IPv4 address.
  for (const a of ['::7f00:1', '::a00:1', '::a9fe:a9fe', '::808:808', '::0.0.0.2', '::ffff:0:7f00:1', '64:ff9b::7f00:1', '64:ff9b::808:808', '64:ff9b:1::7f00:1',
    '2002:7f00:1::1', '2002:808:808::1', '2001:0:4136:e378:8000:63bf:80ff:fffe']) {
    t.equal(addressClass(a), 'special', `${a} embeds an IPv4 address`);
    t.equal(originAddressAllowed(a, true, true), false, `${a} refused with allow_private_network`);
  }
  t.equal(addressClass('::ffff:7f00:1'), 'private', 'IPv4-mapped: the IPv4 address it carries');
  t.equal(addressClass('::ffff:808:808'), 'public');
  const cases: [string, boolean, boolean, boolean][] = [
    // address, allow_private_network, ssrf_protection, allowed
    ['8.8.8.8', false, true, true],
    ['10.0.0.1', false, true, false],
    ['10.0.0.1', false, false, false],
    ['127.0.0.1', false, false, false],
    ['10.0.0.1', true, true, true],
    ['169.254.169.254', true, true, false],
    ['169.254.169.254', false, false, false],
    ['169.254.169.254', true, false, true],
    ['fd00:ec2::254', true, true, false],
  ];
  for (const [a, allowPrivate, ssrf, allowed] of cases) t.equal(originAddressAllowed(a, allowPrivate, ssrf), allowed, `${a} allow_private_network=${allowPrivate} ssrf_protection=${ssrf}`);
});

t.test('authority parsing (Host / URI authority)', async (t) => {
  t.same(parseAuthority('cdn.test'), { host: 'cdn.test', port: null });
  t.same(parseAuthority('CDN.Test.:8080'), { host: 'cdn.test', port: 8080 });
  t.same(parseAuthority('[::1]:443'), { host: '[::1]', port: 443 });
  t.same(parseAuthority('[2001:DB8::1]'), { host: '[2001:db8::1]', port: null });
  t.same(parseAuthority('10.0.0.1:00080'), { host: '10.0.0.1', port: 80 });
  t.same(parseAuthority('my_host-1.example'), { host: 'my_host-1.example', port: null });
  t.same(parseAuthority(''), { host: '', port: null });
  for (const bad of ['cdn.test:', 'cdn.test:0', 'cdn.test:65536', 'cdn.test:123456', 'cdn.test:8a', 'cdn.test:"><img>', 'a..b', '.a', 'a..', 'a b', 'u@h', 'h/x', 'h%41', '[::1', '[::1]x', '[fe80::1%25eth0]', '[v1.x]', ':80', 'x'.repeat(64) + '.test', ('a'.repeat(60) + '.').repeat(5)]) {
    t.equal(parseAuthority(bad), null, JSON.stringify(bad.length > 40 ? bad.slice(0, 40) + '…' : bad));
  }
  t.equal(formatAuthority({ host: 'cdn.test', port: 80 }, 80), 'cdn.test', 'default port dropped');
  t.equal(formatAuthority({ host: 'cdn.test', port: 8443 }, 443), 'cdn.test:8443');
  t.equal(formatAuthority({ host: '[::1]', port: 80 }, 443), '[::1]:80');
});

t.test('path normalisation (RFC 3986 6.2.2 + 5.2.4)', async (t) => {
  const ok: [string, string][] = [
    ['/plain/path.mp4', '/plain/path.mp4'],
    ['/', '/'],
    ['/../secret', '/secret'],
    ['/a/../../secret', '/secret'],
    ['/%2e%2e/secret', '/secret'],
    ['/a/./b/../c', '/a/c'],
    ['/a/b/..', '/a/'],
    ['/a/.', '/a/'],
    ['/a//../b', '/a/b'],
    ['/.well-known/x', '/.well-known/x'],
    ['/a/.hidden/..x', '/a/.hidden/..x'],
    ['/%7e%41%2D%5f', '/~A-_'],
    ['/caf%c3%a9', '/caf%C3%A9'],
    ['/a%3Bb', '/a%3Bb'],
    ['/a;b/c', '/a;b/c'],
  ];
  for (const [input, expected] of ok) t.equal(normalizePath(input), expected, input);
  for (const bad of ['/a%2fb', '/a%2F..', '/a%5cb', '/a\\b', '/a%00', '/a\0b', '/a#b', '/a%', '/a%4', '/a%g0', '/..;/x', '/a/.;/b', '/a/%2e%2e;x/b', 'relative', '']) {
    t.equal(normalizePath(bad), null, JSON.stringify(bad));
  }
  const same = '/videos/show-1/seg-1.ts';
  t.equal(normalizePath(same), same, 'an already normal path comes back as is');
});

t.test('pathGlobProblem accepts what compiles and names what does not', async (t) => {
  for (const ok of ['*', '**', '/', '/videos/*', '/**/*.ts', '/*.{jpg,png}', '/a/[abc].js', '/api/?']) t.equal(pathGlobProblem(ok), null, ok);
  for (const bad of ['videos/*', '/a b', '/a/{b', '/a/b}', '/a/[x', '/a/x]', '/a/***', '/a\u0000']) t.type(pathGlobProblem(bad), 'string', JSON.stringify(bad));
});

t.test('hostPatternProblem accepts names, "*" and a leading wildcard label only', async (t) => {
  for (const ok of ['*', 'example.com', '*.example.com', 'Media.Example.COM.', 'a_b.example']) t.equal(hostPatternProblem(ok), null, ok);
  for (const bad of ['a.*.com', '*example.com', 'example.com:80', 'exa mple.com', '-a.com', '', 'a..b']) t.type(hostPatternProblem(bad), 'string', bad);
});
