// Prefix tokens (issue 36) on a real agent process in front of a real origin:
// a player-like client fetches a playlist and the segments it names with one
// token for /videos/123/*, carried in the query, in a cookie and as a path
// segment; a sibling path, dot segments and encoded escapes, another endpoint,
// a secret past its grace are each refused with the one 403 while
// edge_policy_denials_total names the reason; a secret inside its grace
// passes; neither the cache key nor the origin request carries the token.
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { pathWithToken, signPrefixToken } from '../../shared/src/signing/prefix-token.ts';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { HOST, rawRequest, snapshotFor, startConfiguredAgent, startOrigin } from './helpers.ts';

const CURRENT = 'current-secret-of-k1-0123456789-abcdefghijkl';
const IN_GRACE = 'replaced-secret-in-grace-0123456789-abcdefgh';
const PAST_GRACE = 'replaced-secret-past-grace-0123456789-abcdef';
const BOUND = 'secret-of-the-ip-bound-key-0123456789-abcdefg';
const OTHER = 'secret-of-the-other-endpoint-0123456789-abcd';
const OTHER_HOST = 'other.test';
const cli = fileURLToPath(new URL('../src/policy/sign-url-cli.ts', import.meta.url));
const PLAYLIST = '#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nseg-1.ts\n#EXTINF:4,\nhd/seg-2.ts\n#EXT-X-ENDLIST\n';

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=600' });
  res.end(req.url!.endsWith('.m3u8') ? PLAYLIST : `origin saw ${req.url}`);
});
const hour = 3_600_000;
/** Key k1 mid-rotation: its current secret, one replaced an hour ago (grace left), one whose grace ended. */
const rotating = [[CURRENT, null], [IN_GRACE, hour], [PAST_GRACE, -60_000]] as const;
const snapshot = snapshotFor(origin.port, {
  endpoint: {
    signing_keys: [
      { id: 'k1', algorithm: 'HMAC-SHA256', secrets: rotating.map(([secret, left]) => ({ secret, valid_until: left === null ? null : new Date(Date.now() + left).toISOString() })) },
      { id: 'k2', algorithm: 'HMAC-SHA512', secrets: [{ secret: BOUND }], token_param: 'sig', expires_param: 'exp', ip_binding_enabled: true },
    ],
  },
});
const ep1 = snapshot.endpoints[0]!;
(snapshot.endpoints as unknown[]).push({
  ...ep1, id: 'ep2', hostname: OTHER_HOST, default_origin_id: 'o2', origins: [{ ...(ep1.origins[0] as object), id: 'o2' }],
  signing_keys: [{ id: 'k3', algorithm: 'HMAC-SHA256', secrets: [{ secret: OTHER }] }],
});
t.teardown(() => origin.close());
const agent = await startConfiguredAgent(t, snapshot, { TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32' });
const metricsPort = agent.metricsPort;

const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;
const token = (acl = '/videos/123/*', more: Partial<Parameters<typeof signPrefixToken>[0]> = {}) => signPrefixToken({ secret: CURRENT, acl, expires: inAnHour(), ...more });

/** One request with its target as written (no client normalises it), from a viewer the trusted X-Forwarded-For names. */
function get(target: string, headers: Record<string, string> = {}, host = HOST, viewer = '198.51.100.20') {
  const lines = [`GET ${target} HTTP/1.1`, `Host: ${host}`, `X-Forwarded-For: ${viewer}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), 'Connection: close'];
  return rawRequest(agent.port, lines);
}

async function denials(reason: string, endpoint = 'ep1'): Promise<number> {
  const text = await (await request(`http://127.0.0.1:${metricsPort}/metrics`)).body.text();
  const m = new RegExp(`edge_policy_denials_total\\{endpoint="${endpoint}",policy="signed_url",reason="${reason}"\\} (\\d+)`).exec(text);
  return m === null ? 0 : Number(m[1]);
}

/** The request gets the one 403 and the metric counts it under the reason. */
async function refused(t: Test, what: string, reason: string, target: string, headers: Record<string, string> = {}, host = HOST, endpoint = 'ep1', viewer?: string) {
  const before = await denials(reason, endpoint);
  const res = await get(target, headers, host, viewer);
  t.equal(res.status, 403, what);
  t.equal(res.body, 'Forbidden\n', `${what}: the one refusal`);
  t.equal(await denials(reason, endpoint), before + 1, `${what}: counted as ${reason}`);
}

/** What a player does: the playlist, then each segment it names, resolved against the playlist's URL; the bodies. */
async function play(t: Test, playlist: string, headers: Record<string, string>, carry: (segment: string) => string = (s) => s) {
  const list = await get(playlist, headers);
  t.equal(list.status, 200, `playlist ${playlist}`);
  t.equal(list.body, PLAYLIST);
  const base = new URL(playlist, `http://${HOST}`);
  const bodies: string[] = [];
  for (const line of list.body.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
    const u = new URL(line, base);
    const res = await get(carry(u.pathname), headers);
    t.equal(res.status, 200, `segment ${u.pathname}`);
    bodies.push(res.body);
  }
  return bodies;
}

const SEGMENTS = ['origin saw /videos/123/seg-1.ts', 'origin saw /videos/123/hd/seg-2.ts'];

t.test('a player gets the playlist and its segments with one token in the query, a cookie or a path segment', async (t) => {
  const tok = token();
  t.same(await play(t, `/videos/123/index.m3u8?token=${encodeURIComponent(tok)}`, {}, (s) => `${s}?token=${tok}`), SEGMENTS, 'query (encoded and as is)');
  t.same(await play(t, '/videos/123/index.m3u8', { Cookie: `lang=fr; token=${tok}` }), SEGMENTS, 'cookie');
  t.same(await play(t, pathWithToken('/videos/123/index.m3u8', 'token', tok), {}), SEGMENTS, 'path segment: relative URLs inherit it');
  t.equal(origin.count('/videos/123/index.m3u8'), 1, 'one cached playlist whatever the form');
  t.equal(origin.count('/videos/123/seg-1.ts'), 1);
  t.notOk(origin.requests.some((r) => /token|hmac|acl=/.test(r.url) || /token=|hmac/.test(String(r.headers.cookie ?? ''))), 'the origin never sees the token');
});

t.test('two viewers with different tokens share one cached object and one origin fetch', async (t) => {
  const a = token('/videos/123/*', { expires: inAnHour() + 1 });
  const b = token('/videos/*', { expires: inAnHour() + 2 });
  const first = await get('/videos/123/seg-3.ts', { Cookie: `lang=fr; token=${a}; theme=dark` });
  const second = await get(pathWithToken('/videos/123/seg-3.ts', 'token', b), {}, HOST, '203.0.113.50');
  t.equal(first.status, 200);
  t.equal(second.status, 200);
  t.equal(first.headers['x-cache-status'], 'MISS');
  t.equal(second.headers['x-cache-status'], 'HIT');
  t.equal(second.body, 'origin saw /videos/123/seg-3.ts');
  t.equal(origin.count('/videos/123/seg-3.ts'), 1);
  t.equal(origin.requests.find((r) => r.url === '/videos/123/seg-3.ts')?.headers.cookie, 'lang=fr; theme=dark', 'the viewer\'s other cookies reach the origin, the token cookie does not');
});

t.test('a sibling path, dot segments, encoded escapes and another case are outside the pattern', async (t) => {
  const tok = token();
  await refused(t, 'sibling, query', 'pattern_mismatch', `/videos/124/index.m3u8?token=${tok}`);
  await refused(t, 'sibling, cookie', 'pattern_mismatch', '/videos/124/index.m3u8', { Cookie: `token=${tok}` });
  await refused(t, 'sibling, path segment', 'pattern_mismatch', pathWithToken('/videos/124/index.m3u8', 'token', tok));
  await refused(t, 'dot segments', 'pattern_mismatch', `/videos/123/../124/index.m3u8?token=${tok}`);
  await refused(t, 'encoded dot segments', 'pattern_mismatch', `/videos/123/%2e%2e/124/index.m3u8?token=${tok}`);
  await refused(t, 'dot segments behind a path token', 'missing', `/videos/123/token=${tok}/../../124/index.m3u8`);
  await refused(t, 'another case', 'pattern_mismatch', `/VIDEOS/123/index.m3u8?token=${tok}`);
  await refused(t, 'an exact pattern does not cover its neighbour', 'pattern_mismatch', `/videos/123/seg-2.ts?token=${token('/videos/123/seg-1.ts')}`);
  for (const target of [`/videos/123/..%2f124/index.m3u8?token=${tok}`, `/videos/123/%2E%2E%2F124/index.m3u8?token=${tok}`, `/videos/123/..;/124/index.m3u8?token=${tok}`]) {
    t.equal((await get(target)).status, 400, `${target.split('?')[0]}: refused before any check`);
  }
  t.equal(origin.count('/videos/124/index.m3u8'), 0, 'nothing refused reached the origin');
});

t.test('another endpoint refuses the token, in every form; its own key\'s token passes there', async (t) => {
  const tok = token();
  await refused(t, 'cookie on another endpoint', 'bad_signature', '/videos/123/index.m3u8', { Cookie: `token=${tok}` }, OTHER_HOST, 'ep2');
  await refused(t, 'query on another endpoint', 'bad_signature', `/videos/123/index.m3u8?token=${tok}`, {}, OTHER_HOST, 'ep2');
  await refused(t, 'path on another endpoint', 'bad_signature', pathWithToken('/videos/123/index.m3u8', 'token', tok), {}, OTHER_HOST, 'ep2');
  const own = signPrefixToken({ secret: OTHER, acl: '/videos/123/*', expires: inAnHour() });
  t.equal((await get('/videos/123/index.m3u8', { Cookie: `token=${own}` }, OTHER_HOST)).status, 200);
  await refused(t, 'and the other endpoint\'s token here', 'bad_signature', '/videos/123/index.m3u8', { Cookie: `token=${own}` });
});

t.test('rotation: a replaced secret passes until its valid_until, not after', async (t) => {
  t.equal((await get(`/videos/123/index.m3u8?token=${token('/videos/123/*', { secret: IN_GRACE })}`)).status, 200, 'inside the grace period');
  await refused(t, 'past the grace period', 'retired_secret', `/videos/123/index.m3u8?token=${token('/videos/123/*', { secret: PAST_GRACE })}`);
  await refused(t, 'past the grace period, cookie', 'retired_secret', '/videos/123/index.m3u8', { Cookie: `token=${token('/videos/123/*', { secret: PAST_GRACE })}` });
});

t.test('times, address binding and malformed tokens', async (t) => {
  const now = Math.floor(Date.now() / 1000);
  await refused(t, 'expired', 'expired', `/videos/123/index.m3u8?token=${token('/videos/123/*', { expires: now - 10 })}`);
  await refused(t, 'not yet valid', 'not_yet_valid', `/videos/123/index.m3u8?token=${token('/videos/123/*', { start: now + 600 })}`);
  t.equal((await get(`/videos/123/index.m3u8?token=${token('/videos/123/*', { start: now - 600 })}`)).status, 200, 'started');
  const bound = (ip?: string) => signPrefixToken({ secret: BOUND, algorithm: 'HMAC-SHA512', acl: '/videos/123/*', expires: inAnHour(), ip });
  t.equal((await get(`/videos/123/index.m3u8?sig=${bound('203.0.113.7')}`, {}, HOST, '203.0.113.7')).status, 200, 'bound, from its address');
  t.equal((await get(pathWithToken('/videos/123/index.m3u8', 'sig', bound('2001:db8::7')), {}, HOST, '2001:db8::7')).status, 200, 'bound IPv6, path segment');
  await refused(t, 'bound, from another address', 'ip_mismatch', `/videos/123/index.m3u8?sig=${bound('203.0.113.7')}`, {}, HOST, 'ep1', '203.0.113.8');
  await refused(t, 'a bound key\'s token without an address', 'malformed', `/videos/123/index.m3u8?sig=${bound()}`);
  await refused(t, 'a cut token', 'malformed', `/videos/123/index.m3u8?token=${token().slice(0, -3)}`);
  await refused(t, 'two path tokens', 'malformed', `/videos/123/token=${token()}/token=${token()}/index.m3u8`);
  await refused(t, 'a forged pattern', 'bad_signature', `/videos/123/index.m3u8?token=${token('/videos/124/*').replace(Buffer.from('/videos/124/*').toString('base64url'), Buffer.from('/videos/123/*').toString('base64url'))}`);
  const cookieOnly = await get('/videos/123/index.m3u8', { Cookie: 'token=the-site-own-cookie' });
  t.equal(cookieOnly.status, 403, 'a cookie of that name that is no token is no token');
});

t.test('exact-path signed URLs keep working beside prefix tokens', async (t) => {
  const res = await get(signPath({ path: '/videos/123/seg-1.ts', expires: inAnHour(), secret: CURRENT }));
  t.equal(res.status, 200);
  t.equal(res.body, 'origin saw /videos/123/seg-1.ts');
});

t.test('`npm run sign-url --acl` prints a token in each form, each accepted; it refuses a URL its pattern does not cover', async (t) => {
  const sign = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, SIGNING_SECRET: CURRENT } });
  const run = sign('--url', `http://${HOST}/videos/123/hd/seg-4.ts?q=1`, '--acl', '/videos/./123/*', '--expires-in', '600');
  t.equal(run.status, 0, run.stderr);
  t.notMatch(run.stdout, CURRENT, 'the secret is not printed');
  const form = (label: string) => new RegExp(`^${label}: (.*)$`, 'm').exec(run.stdout)?.[1] ?? '';
  const tok = form('token');
  t.equal(Buffer.from(/~acl=([^~]+)/.exec(tok)?.[1] ?? '', 'base64url').toString(), '/videos/123/*', 'the pattern as the edge normalises it');
  const query = new URL(form('query URL'));
  const path = new URL(form('path URL'));
  t.equal(form('Cookie'), `token=${tok}`);
  t.match(form('Set-Cookie'), /; Path=\/videos\/123\/; Secure; HttpOnly; SameSite=None$/);
  for (const [what, target, headers] of [
    ['query', query.pathname + query.search, {}],
    ['cookie', '/videos/123/hd/seg-4.ts?q=1', { Cookie: form('Cookie') }],
    ['path', path.pathname + path.search, {}],
  ] as const) {
    const res = await get(target, headers);
    t.equal(res.status, 200, what);
    t.equal(res.body, 'origin saw /videos/123/hd/seg-4.ts?q=1', `${what}: the origin gets the path and other parameters, no token`);
  }
  const outside = sign('--url', '/videos/124/a.ts', '--acl', '/videos/123/*');
  t.equal(outside.status, 1);
  t.match(outside.stderr, /does not cover/);
  const startAlone = sign('--url', '/videos/123/a.ts', '--start', '1');
  t.equal(startAlone.status, 1);
  t.match(startAlone.stderr, /--start is for prefix tokens/);
  const badPattern = sign('--url', '/videos/123/a.ts', '--acl', '/videos/*/a.ts');
  t.equal(badPattern.status, 1);
  t.match(badPattern.stderr, /"\*" only at its end/);
});
