import t from 'tap';
import { compilePathGlob, compilePathGlobs, globLiteralPrefix } from './glob.ts';
import { compileHostPattern, compileHostPatterns, normalizeHost } from './host.ts';
import { compileCidr, isPrivateAddress, isValidCidr } from './cidr.ts';

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
