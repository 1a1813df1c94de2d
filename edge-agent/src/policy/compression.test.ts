// Compression decisions: Accept-Encoding negotiation with q-values, which
// answers may be compressed, the encoded representation's ETag and head, the
// route's compression_enabled over the endpoint's, and the codecs themselves.
import t from 'tap';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { endpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileCompression, compressBuffer, compressible, encodedEtag, encodedHead, isCompressibleType, preferredCoding } from './compression.ts';

const settings = (c: Record<string, unknown> = {}, route: boolean | null = null) => compileCompression(endpointSnapshot.shape.compression.parse({ enabled: true, ...c }), route);

t.test('Accept-Encoding: the highest q-value wins, the configured order breaks ties, q=0 and bad q-values refuse', async (t) => {
  const both = ['br', 'gzip'] as const;
  t.equal(preferredCoding('gzip, br', both), 'br');
  t.equal(preferredCoding('gzip, br', ['gzip', 'br']), 'gzip');
  t.equal(preferredCoding('br;q=0.2, gzip;q=0.9', both), 'gzip');
  t.equal(preferredCoding('br;q=0, gzip;q=0', both), null);
  t.equal(preferredCoding('*', both), 'br');
  t.equal(preferredCoding('br;q=0, *;q=0.5', both), 'gzip', '* covers what is not named');
  t.equal(preferredCoding('x-gzip', both), 'gzip');
  t.equal(preferredCoding('GZIP ; Q=0.5', both), 'gzip', 'names and parameters are case-insensitive');
  t.equal(preferredCoding('gzip;q=1.5', both), null);
  t.equal(preferredCoding('gzip;q=0.1234', both), null, 'at most three decimals');
  t.equal(preferredCoding('deflate, identity', both), null);
  t.equal(preferredCoding(', ,gzip', both), 'gzip');
  t.equal(preferredCoding('gzip', ['br']), null, 'only the endpoint\'s algorithms');
});

t.test('the settings in force: the endpoint\'s flag, or the route\'s when it is not null', async (t) => {
  t.equal(compileCompression(endpointSnapshot.shape.compression.parse({ enabled: false })), null);
  t.not(compileCompression(endpointSnapshot.shape.compression.parse({ enabled: false }), true), null, 'a route may turn it on');
  t.equal(settings({}, false), null, 'or off');
  const s = settings({ algorithms: ['gzip'] })!;
  t.equal(s.negotiate('br, gzip'), 'gzip');
  t.equal(s.negotiate('br, gzip'), 'gzip', 'memoised, same answer');
  t.equal(s.negotiate(undefined), null);
});

t.test('what may be compressed', async (t) => {
  const s = settings({ min_size_bytes: 100 })!;
  const fields = (h: Record<string, string>) => (name: string) => h[name];
  const ok = (h: Record<string, string>, length: number | null = 1000, status = 200) => compressible(status, fields(h), length, s);
  t.ok(ok({ 'content-type': 'text/html; charset=utf-8' }));
  t.ok(ok({ 'content-type': 'application/vnd.apple.mpegurl' }), 'HLS playlists');
  t.ok(ok({ 'content-type': 'application/dash+xml' }), 'DASH manifests (+xml)');
  t.ok(ok({ 'content-type': 'application/problem+json' }));
  t.ok(ok({ 'content-type': 'text/plain' }, null), 'an unknown length counts as large enough');
  t.notOk(ok({ 'content-type': 'text/plain' }, 99), 'below min_size_bytes');
  t.notOk(ok({ 'content-type': 'text/event-stream' }));
  t.notOk(ok({ 'content-type': 'video/mp4' }));
  t.notOk(ok({}), 'no content type');
  t.notOk(ok({ 'content-type': 'text/plain', 'content-encoding': 'gzip' }));
  t.ok(ok({ 'content-type': 'text/plain', 'content-encoding': 'identity' }));
  t.notOk(ok({ 'content-type': 'text/plain', 'cache-control': 'public, No-Transform' }));
  t.notOk(ok({ 'content-type': 'text/html', 'cache-control': 'private, max-age=60' }), 'BREACH: a private answer');
  t.notOk(ok({ 'content-type': 'text/html', 'cache-control': 'max-age=0, private="set-cookie"' }), 'BREACH: a qualified private');
  t.notOk(ok({ 'content-type': 'text/html', 'cache-control': 'No-Store' }), 'BREACH: a no-store answer');
  t.notOk(ok({ 'content-type': 'text/html', 'set-cookie': 'sid=1' }), 'BREACH: an answer that sets a cookie');
  t.ok(ok({ 'content-type': 'text/html', 'cache-control': 'public, max-age=60, x-private-ish' }), 'a directive merely containing the word');
  t.notOk(ok({ 'content-type': 'text/plain', 'content-range': 'bytes 0-9/100' }));
  t.notOk(ok({ 'content-type': 'text/plain' }, 1000, 206));
  t.notOk(ok({ 'content-type': 'text/plain' }, 0, 200));
  t.ok(isCompressibleType('image/svg+xml'));
  t.notOk(isCompressibleType('image/png'));
});

t.test('the encoded representation: ETag suffixed inside the quotes, Content-Encoding, its length, Vary, no Accept-Ranges', async (t) => {
  t.equal(encodedEtag('"abc"', 'br'), '"abc-br"');
  t.equal(encodedEtag('W/"abc"', 'gzip'), 'W/"abc-gzip"');
  t.equal(encodedEtag('abc', 'gzip'), undefined, 'not a quoted entity tag: dropped');
  t.equal(encodedEtag('"', 'gzip'), undefined);
  t.equal(encodedEtag(undefined, 'gzip'), undefined);
  t.same(encodedHead(['content-type', 'text/html', 'content-length', '5000', 'etag', '"v1"', 'accept-ranges', 'bytes', 'vary', 'Cookie'], 'gzip', 1200), [
    'content-type', 'text/html', 'etag', '"v1-gzip"', 'vary', 'Cookie, Accept-Encoding', 'content-encoding', 'gzip', 'content-length', '1200',
  ]);
  t.same(encodedHead(['vary', 'accept-encoding'], 'br', null), ['vary', 'accept-encoding', 'content-encoding', 'br'], 'Vary not repeated; no length while streaming');
});

t.test('the codecs round-trip', async (t) => {
  const body = Buffer.from('streaming platform '.repeat(500));
  t.same(gunzipSync(await compressBuffer('gzip', body)), body);
  const br = await compressBuffer('br', body);
  t.same(brotliDecompressSync(br), body);
  t.ok(br.length < body.length / 10);
});
