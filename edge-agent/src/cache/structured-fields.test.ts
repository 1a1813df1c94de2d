// The RFC 8941 Dictionary parser and the CDN-Cache-Control reading built on it (RFC 9213 §2.1).
import t from 'tap';
import { parseTargetedCacheControl } from './cache-control.ts';
import { parseDictionary } from './structured-fields.ts';

const plain = (value: string) => {
  const d = parseDictionary(value);
  return d === null ? null : Object.fromEntries([...d].map(([k, m]) => [k, m.type === 'inner-list' ? m.items.map((i) => i.value) : m.value]));
};

t.test('RFC 8941 §3.2: dictionaries from the RFC examples parse', async (t) => {
  t.same(plain('en="Applepie", da=:w4ZibGV0w6ZydGU=:'), { en: 'Applepie', da: 'w4ZibGV0w6ZydGU=' });
  t.same(plain('a=?0, b, c; foo=bar'), { a: false, b: true, c: true });
  t.same(plain('rating=1.5, feelings=(joy sadness)'), { rating: 1.5, feelings: ['joy', 'sadness'] });
  t.same(plain('a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid'), { a: [1, 2], b: 3, c: 4, d: [5, 6] });
  t.same(plain('a=1,b=2'), { a: 1, b: 2 }, 'no space after the comma');
  t.same(plain('a=1 ,\tb=2'), { a: 1, b: 2 }, 'OWS around the comma');
  t.same(plain('a=1, a=2'), { a: 2 }, 'a repeated key: the last wins');
  t.same(plain('  a=1'), { a: 1 }, 'leading spaces');
  t.same(plain('a="x\\"y\\\\z"'), { a: 'x"y\\z' }, 'string escapes');
  t.same(plain('a=*tok/en:x'), { a: '*tok/en:x' }, 'a token with * / :');
  t.same(plain('a=-12, b=0.001'), { a: -12, b: 0.001 });
});

t.test('RFC 8941 §4.2: malformed dictionaries fail whole', async (t) => {
  for (const bad of [
    'a=1,', 'a=1,,b=2', 'A=1', '1a=2', 'a=', 'a="unterminated', 'a="\\x"', 'a=@123', 'a=1;p=@1', 'a=%"x"',
    'a=1.', 'a=1.1234', 'a=1234567890123.1', 'a=1234567890123456', 'a=?2', 'a=:not base64!:', 'a=(1 2', 'a=(1,2)',
    'a=1 b=2', 'a=1;', 'a=1; P=2', 'a=--1', 'a="é"', '\ta=1',
  ]) t.equal(parseDictionary(bad), null, JSON.stringify(bad));
});

t.test('RFC 9213 §2.1: CDN-Cache-Control directives by type; a wrong type ignores the field', async (t) => {
  t.same(parseTargetedCacheControl('max-age=60, stale-if-error=300'), { 'max-age': '60', 'stale-if-error': '300' });
  t.same(parseTargetedCacheControl('no-store'), { 'no-store': true });
  t.same(parseTargetedCacheControl('no-store=?0, max-age=5'), { 'max-age': '5' }, 'Boolean false: absent');
  t.same(parseTargetedCacheControl('private="set-cookie", max-age=5;ignored=1'), { private: 'set-cookie', 'max-age': '5' }, 'parameters ignored');
  t.same(parseTargetedCacheControl('none'), { none: true }, 'an unknown directive keeps the field (and Cache-Control out)');
  t.same(parseTargetedCacheControl(['max-age=60', 'public']), { 'max-age': '60', public: true }, 'field lines combined');
  for (const bad of ['max-age="60"', 'max-age=60.0', 'max-age=-1', 'max-age=sixty', 's-maxage=(1 2)', 'no-store=1', 'public="yes"', 'private=1', 'max-age=60,', 'max-age=60;a=@1', 'MAX-AGE=60', '']) {
    t.equal(parseTargetedCacheControl(bad), null, JSON.stringify(bad));
  }
  t.equal(parseTargetedCacheControl(undefined), null);
});
