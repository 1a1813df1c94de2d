// Request bodies and their Content-Encoding, through the real server: bytes
// that do not decode as the coding they claim are 400, an unknown coding is
// 415 naming what is taken, a well-coded JSON body works (regression: gzip
// with plain bytes answered 500 on every JSON route, unauthenticated ones
// included, enough to page the 5xx alert). Nothing stored changes on a refusal.
import t from 'tap';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { bearer, createLoggedInUser, everyTableRowCount, PASSWORD, RELAXED_LIMITS, uniqueEmail } from '../../../test/support/auth.ts';

const cp = await startTestControlPlane(t, { env: RELAXED_LIMITS });
const user = await createLoggedInUser(cp);
const admin = await createLoggedInUser(cp, { roles: ['superadmin', 'subscriber'] });

/** JSON routes, unauthenticated and not, each with a body it would accept. */
const routes: { method: string; path: string; headers: () => Record<string, string>; json: () => unknown }[] = [
  { method: 'POST', path: '/v1/auth/register', headers: () => ({}), json: () => ({ email: uniqueEmail('coded'), password: PASSWORD, accept_terms: true }) },
  { method: 'POST', path: '/v1/auth/login', headers: () => ({}), json: () => ({ email: user.email, password: PASSWORD }) },
  { method: 'POST', path: '/v1/auth/password/forgot', headers: () => ({}), json: () => ({ email: user.email }) },
  { method: 'PATCH', path: '/v1/users/me', headers: () => bearer(user.accessToken), json: () => ({ display_name: 'Coded Name' }) },
  { method: 'POST', path: '/v1/cdn/api-tokens', headers: () => bearer(admin.accessToken), json: () => ({ name: 'coded', role: 'viewer' }) },
];

const send = (route: (typeof routes)[number], body: Buffer, encoding: string) =>
  cp.request(route.method, route.path, { headers: { ...route.headers(), 'content-type': 'application/json', 'content-encoding': encoding }, body });

t.test('a body that does not decode as its gzip, deflate or br Content-Encoding is 400 with the error body, on every route, and nothing is stored', async (t) => {
  const before = await everyTableRowCount(cp);
  const plain = (route: (typeof routes)[number]) => Buffer.from(JSON.stringify(route.json()));
  for (const route of routes) {
    for (const [encoding, body] of [
      ['gzip', plain(route)],
      ['deflate', plain(route)],
      ['br', plain(route)],
      ['gzip', gzipSync(plain(route)).subarray(0, 12)], // cut short
      ['x-gzip', Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0xff, 0xff])],
      ['GZIP', brotliCompressSync(plain(route))], // another coding's bytes
    ] as const) {
      const res = await send(route, body, encoding);
      const what = `${route.method} ${route.path} ${encoding}`;
      t.equal(res.status, 400, what);
      t.equal(res.body.code, 'VALIDATION_ERROR', what);
      t.type(res.body.request_id, 'string', what);
      t.same(res.body.errors, [{ field: '(body)', message: `Not valid ${encoding.toLowerCase().replace('x-', '')} data (Content-Encoding: ${encoding.toLowerCase().replace('x-', '')})` }], what);
    }
  }
  t.same(await everyTableRowCount(cp), before, 'no table changed');
});

t.test('an unknown or stacked Content-Encoding is 415 naming the codings taken, on every route, and nothing is stored', async (t) => {
  const before = await everyTableRowCount(cp);
  for (const route of routes) {
    for (const encoding of ['zstd-foo', 'compress', 'zstd', 'gzip, br', 'identity, gzip', 'x-compress']) {
      const body = encoding.startsWith('gzip') ? brotliCompressSync(gzipSync(JSON.stringify(route.json()))) : Buffer.from(JSON.stringify(route.json()));
      const res = await send(route, body, encoding);
      const what = `${route.method} ${route.path} ${encoding}`;
      t.equal(res.status, 415, what);
      t.equal(res.body.code, 'UNSUPPORTED_MEDIA_TYPE', what);
      t.equal(res.headers.get('accept-encoding'), 'gzip, deflate, br', what);
      t.match(res.body.message, `The Content-Encoding "${encoding}" is not accepted`, what);
    }
  }
  t.same(await everyTableRowCount(cp), before, 'no table changed');
});

t.test('a JSON body coded gzip, deflate or br (any case, x-gzip too) is decoded and works as an uncoded one', async (t) => {
  const patch = routes.find((r) => r.path === '/v1/users/me')!;
  for (const [encoding, code] of [['gzip', gzipSync], ['deflate', deflateSync], ['br', brotliCompressSync], ['X-GZip', gzipSync], ['identity', (b: Buffer) => b]] as const) {
    const name = `Coded ${encoding}`;
    const res = await send(patch, code(Buffer.from(JSON.stringify({ display_name: name }))), encoding);
    t.equal(res.status, 200, `${encoding}: ${res.text}`);
    t.equal(res.body.data.display_name, name);
  }
  const login = routes.find((r) => r.path === '/v1/auth/login')!;
  const res = await send(login, gzipSync(JSON.stringify(login.json())), 'gzip');
  t.equal(res.status, 200, 'an unauthenticated route too');
  t.type(res.body.data.access_token, 'string');
});

t.test('a body that decodes past the body limit is 413, as an uncoded one', async (t) => {
  const route = routes[0]!;
  const huge = gzipSync(Buffer.from(JSON.stringify({ email: 'a@example.com', password: 'x'.repeat(2 * 1024 * 1024) })));
  t.ok(huge.length < 1024 * 1024, 'under the limit as sent');
  const res = await send(route, huge, 'gzip');
  t.equal(res.status, 413);
  t.equal(res.body.code, 'PAYLOAD_TOO_LARGE');
});

t.test('an upload takes no Content-Encoding: 415 naming identity, nothing stored', async (t) => {
  const before = await everyTableRowCount(cp);
  const form = new FormData();
  form.append('file', new Blob([Buffer.from('89504e470d0a1a0a', 'hex')], { type: 'image/png' }), 'a.png');
  const request = new Request('http://x/', { method: 'PUT', body: form });
  const res = await cp.request('PUT', '/v1/users/me/avatar', {
    headers: { ...bearer(user.accessToken), 'content-type': request.headers.get('content-type')!, 'content-encoding': 'gzip' },
    body: gzipSync(Buffer.from(await request.arrayBuffer())),
  });
  t.equal(res.status, 415);
  t.equal(res.body.code, 'UNSUPPORTED_MEDIA_TYPE');
  t.equal(res.headers.get('accept-encoding'), 'identity');
  t.same(await everyTableRowCount(cp), before);
});
