// The signed-URL check on its own: what it accepts (every active key, a
// replaced secret until valid_until), each refusal's reason behind one
// identical 403, and the parameters it takes out of the query it lets through.
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { signingKeySnapshot, type SigningKeySnapshot } from '../../../shared/src/config/snapshot.ts';
import { signPath } from '../../../shared/src/signing/signed-url.ts';
import { parseClientAddress } from './client-address.ts';
import type { PolicyAnswer, PolicyRequest } from './index.ts';
import { compileSignedUrls, takePathToken } from './signed-urls.ts';

const NOW = Date.parse('2026-06-01T12:00:00Z');
const nowS = Math.floor(NOW / 1000);
const SECRET = 'current-secret-0123456789-abcdefghijklmnop';
const OLD = 'replaced-secret-0123456789-abcdefghijklmnop';

const key = (k: Partial<SigningKeySnapshot> & { id: string }) => signingKeySnapshot.parse({ secrets: [{ secret: SECRET }], ...k });

function request(pathAndQuery: string, peer = '198.51.100.20'): PolicyRequest {
  const client = parseClientAddress(peer);
  const q = pathAndQuery.indexOf('?');
  const query = q === -1 ? '' : pathAndQuery.slice(q + 1);
  return {
    req: {} as IncomingMessage, endpoint: { id: 'ep', snapshot: {} as never }, host: 'cdn.test', path: q === -1 ? pathAndQuery : pathAndQuery.slice(0, q),
    query, rawQuery: query, client, clientIp: client?.text ?? '', secure: false, routeId: '',
  };
}

const reason = (a: PolicyAnswer | null) => a?.denial?.reason ?? null;

t.test('a URL signed with the key passes, and goes on without its signature parameters', async (t) => {
  const check = compileSignedUrls([key({ id: 'k1' })], () => NOW)!;
  const ctx = request(signPath({ path: '/v/a.mp4?quality=hd&lang=en', expires: nowS + 60, secret: SECRET }));
  t.equal(check(ctx), null);
  t.equal(ctx.query, 'quality=hd&lang=en', 'token and expires are gone; the other parameters stay as sent, in order');
  t.match(ctx.rawQuery, /token=/, 'the query as sent is still known (redirects keep it)');
});

t.test('each refusal has its own reason, and all are the same 403', async (t) => {
  const check = compileSignedUrls([key({ id: 'k1' })], () => NOW)!;
  const good = signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: SECRET });
  const token = /token=([^&]+)/.exec(good)![1]!;
  const cases: [string, string][] = [
    ['/v/a.mp4', 'missing'],
    ['/v/a.mp4?quality=hd', 'missing'],
    [`/v/a.mp4?expires=${nowS + 60}`, 'malformed'],
    [`/v/a.mp4?token=${token}`, 'malformed'],
    [`/v/a.mp4?expires=soon&token=${token}`, 'malformed'],
    [`/v/a.mp4?expires=${nowS + 60}&token=short`, 'malformed'],
    [`/v/a.mp4?expires=${nowS + 60}&token=${token.slice(0, -1)}!`, 'malformed'],
    [`${good}&token=${token}`, 'malformed'],
    [`/v/a.mp4?expires=${nowS + 60}&token=%zz`, 'malformed'],
    [`/v/a.mp4?expires=${nowS + 61}&token=${token}`, 'bad_signature'],
    [`/v/b.mp4?expires=${nowS + 60}&token=${token}`, 'bad_signature'],
    [signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: 'someone-elses-secret-0123456789-abcdefghij' }), 'bad_signature'],
    [signPath({ path: '/v/a.mp4', expires: nowS - 1, secret: SECRET }), 'expired'],
  ];
  const answers = new Set<string>();
  for (const [url, expected] of cases) {
    const answer = check(request(url));
    t.equal(reason(answer), expected, `${url} → ${expected}`);
    t.equal(answer?.status, 403);
    answers.add(JSON.stringify([answer?.status, answer?.headers, answer?.body]));
  }
  t.equal(answers.size, 1, 'the viewer sees one identical answer whatever the reason');
  t.equal(check(request(signPath({ path: '/v/a.mp4', expires: nowS, secret: SECRET }))), null, 'accepted up to and including the expiry second');
});

t.test('IP binding: the address in the token must be the viewer\'s', async (t) => {
  const check = compileSignedUrls([key({ id: 'k1', ip_binding_enabled: true })], () => NOW)!;
  const signed = signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: SECRET, clientIp: '198.51.100.20' });
  t.equal(check(request(signed, '198.51.100.20')), null);
  t.equal(check(request(signed, '::ffff:198.51.100.20')), null, 'the same viewer over a dual-stack socket');
  t.equal(reason(check(request(signed, '198.51.100.21'))), 'ip_mismatch');
  const forged = signed.replace('198.51.100.20', '198.51.100.21');
  t.equal(reason(check(request(forged, '198.51.100.21'))), 'bad_signature', 'changing the address breaks the signature');
  t.equal(reason(check(request(signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: SECRET }), '198.51.100.20'))), 'malformed', 'an unbound token for a bound key');
  const v6 = signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: SECRET, clientIp: '2001:db8::7' });
  t.equal(check(request(v6, '2001:DB8:0::7')), null, 'IPv6, percent-encoded in the URL, compared in canonical form');
});

t.test('rotation: the replaced secret until its valid_until, not after', async (t) => {
  let now = NOW;
  const rotated = key({ id: 'k1', secrets: [{ secret: SECRET, valid_until: null }, { secret: OLD, valid_until: new Date(NOW + 3_600_000).toISOString() }] });
  const check = compileSignedUrls([rotated], () => now)!;
  const old = signPath({ path: '/v/a.mp4', expires: nowS + 86_400, secret: OLD });
  const current = signPath({ path: '/v/a.mp4', expires: nowS + 86_400, secret: SECRET });
  t.equal(check(request(old)), null, 'inside the grace period');
  t.equal(check(request(current)), null);
  now = NOW + 3_600_000;
  t.equal(reason(check(request(old))), 'retired_secret', 'at valid_until it is refused');
  t.equal(check(request(current)), null, 'the current secret still passes');
});

t.test('several keys: each with its own parameters and algorithm; any one of them accepts', async (t) => {
  const check = compileSignedUrls([
    key({ id: 'k1' }),
    key({ id: 'k2', algorithm: 'HMAC-SHA512', token_param: 'sig', expires_param: 'exp', secrets: [{ secret: OLD, valid_until: null }] }),
  ], () => NOW)!;
  const viaK2 = signPath({ path: '/v/a.mp4?x=1', expires: nowS + 60, secret: OLD, algorithm: 'HMAC-SHA512', tokenParam: 'sig', expiresParam: 'exp' });
  const ctx = request(viaK2);
  t.equal(check(ctx), null);
  t.equal(ctx.query, 'x=1');
  const both = request(`${signPath({ path: '/v/a.mp4', expires: nowS + 60, secret: SECRET })}&exp=1&sig=x`);
  t.equal(check(both), null, 'one valid signature is enough');
  t.equal(both.query, '', 'every key\'s parameters are taken out');
  const expiredK1 = `${signPath({ path: '/v/a.mp4', expires: nowS - 5, secret: SECRET })}&exp=1&sig=bad`;
  t.equal(reason(check(request(expiredK1))), 'expired', 'the failure that got furthest is reported');
});

t.test('a verified signature is remembered per compiled configuration only: the next one (a rotation without grace) checks again', async (t) => {
  const url = signPath({ path: '/v/cached.mp4', expires: nowS + 60, secret: SECRET });
  const before = compileSignedUrls([key({ id: 'k1' })], () => NOW)!;
  t.equal(before(request(url)), null);
  t.equal(before(request(url)), null, 'again (remembered)');
  const after = compileSignedUrls([key({ id: 'k1', secrets: [{ secret: OLD, valid_until: null }] })], () => NOW)!;
  t.equal(reason(after(request(url))), 'bad_signature', 'the same key id with a new secret does not reuse what the previous configuration verified');
  t.equal(reason(before(request(url, '198.51.100.20'))), null);
});

t.test('a remembered signature answers only for the path and expiry it was verified for', async (t) => {
  const check = compileSignedUrls([key({ id: 'k1' }), key({ id: 'k2', token_param: 't2', expires_param: 'e2', secrets: [{ secret: OLD, valid_until: null }] })], () => NOW)!;
  const url = signPath({ path: '/v/remembered.mp4', expires: nowS + 60, secret: SECRET });
  t.equal(check(request(url)), null, 'verified (and remembered)');
  const query = url.slice(url.indexOf('?'));
  t.equal(reason(check(request(`/v/other.mp4${query}`))), 'bad_signature', 'the same token on another path is checked again');
  const later = query.replace(/expires=(\d+)/, (_m, e: string) => `expires=${Number(e) + 3600}`);
  t.equal(reason(check(request(`/v/remembered.mp4${later}`))), 'bad_signature', 'with a later expiry too');
  const t2 = query.replace('expires=', 'e2=').replace('token=', 't2=');
  t.equal(reason(check(request(`/v/remembered.mp4${t2}`))), 'bad_signature', 'and under another key\'s parameters');
  t.equal(check(request(url)), null, 'the original still passes');
});

t.test('no keys: no check', async (t) => {
  t.equal(compileSignedUrls([]), null);
});

t.test('a valid_until that is not a date refuses the configuration', async (t) => {
  t.throws(() => compileSignedUrls([key({ id: 'k9', secrets: [{ secret: SECRET, valid_until: 'tomorrow' }] })]), /signing key k9/);
});

t.test('a path-segment token is taken out of the path wherever it stands; other segments stay as they are', async (t) => {
  t.same(takePathToken('/videos/123/token=exp=1~x/index.m3u8', ['token']), { path: '/videos/123/index.m3u8', token: { name: 'token', value: 'exp=1~x' } });
  t.same(takePathToken('/videos/123/token=exp=1~x', ['token']), { path: '/videos/123', token: { name: 'token', value: 'exp=1~x' } }, 'last segment');
  t.same(takePathToken('/token=exp=1~x', ['token']), { path: '/', token: { name: 'token', value: 'exp=1~x' } }, 'the only segment');
  t.same(takePathToken('/a/sig=exp=1~x/b/', ['token', 'sig']), { path: '/a/b/', token: { name: 'sig', value: 'exp=1~x' } }, 'any key\'s token_param; a trailing slash kept');
  t.same(takePathToken('/a/token=1/b/token=2/c', ['token']), { path: '/a/b/c', token: { name: 'token', value: null } }, 'two tokens: both out, and the token is malformed');
  t.same(takePathToken('/a/token=%ZZ/c', ['token']), { path: '/a/c', token: { name: 'token', value: null } }, 'undecodable');
  t.equal(takePathToken('/a/key=v/x.ts', ['token']), null, 'another name=value segment is the path\'s own');
  t.equal(takePathToken('/a/mytoken=v/x.ts', ['token']), null, 'the name must be the whole segment\'s name');
  t.equal(takePathToken('/videos/123/index.m3u8', ['token']), null);
});
