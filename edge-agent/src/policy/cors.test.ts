// CORS of a header policy: which origins a policy allows (exact, subdomain
// patterns with and without ports), the request-independent fields, the echo
// of an allowed Origin, and the preflight answers.
import t from 'tap';
import { responseHeadersPolicySnapshot } from '../../../shared/src/config/snapshot.ts';
import { addRequestCors, addStaticCors, compileCors, preflightAnswer, type CompiledCors } from './cors.ts';

const cors = (c: Record<string, unknown>): CompiledCors => compileCors(responseHeadersPolicySnapshot.parse({ id: 'p', cors: { enabled: true, ...c } }).cors)!;

t.test('disabled CORS compiles to nothing', async (t) => {
  t.equal(compileCors(responseHeadersPolicySnapshot.parse({ id: 'p' }).cors), null);
});

t.test('allowed origins: exact (case-insensitive), *. for any depth of subdomain, ports as written', async (t) => {
  const c = cors({ allow_origins: ['https://app.example', 'https://*.partner.example', 'http://*.local.test:8080'] });
  t.ok(c.allows('https://app.example'));
  t.ok(c.allows('HTTPS://APP.EXAMPLE'));
  t.notOk(c.allows('http://app.example'), 'the scheme counts');
  t.notOk(c.allows('https://app.example:444'), 'so does the port');
  t.ok(c.allows('https://a.partner.example'));
  t.ok(c.allows('https://a.b.partner.example'));
  t.notOk(c.allows('https://partner.example'), 'a subdomain is needed');
  t.notOk(c.allows('https://evilpartner.example'));
  t.notOk(c.allows('https://a.partner.example:8443'), 'no port where the pattern has none');
  t.ok(c.allows('http://x.local.test:8080'));
  t.notOk(c.allows('http://x.local.test'));
  t.notOk(c.allows('null'));
  t.ok(cors({}).allows('https://anything.example'), 'the default is any origin');
});

t.test('any origin without credentials: "*" on every answer, nothing per request', async (t) => {
  const c = cors({ expose_headers: ['ETag', 'X-Id'] });
  t.equal(c.perRequest, false);
  const out: string[] = ['content-type', 'text/plain'];
  addStaticCors(c, out.slice(), out);
  t.same(out, ['content-type', 'text/plain', 'access-control-allow-origin', '*', 'access-control-expose-headers', 'ETag, X-Id']);
  const keep = cors({ override_origin: false });
  const originSaid = ['access-control-allow-origin', 'https://o.example'];
  const kept = originSaid.slice();
  addStaticCors(keep, originSaid, kept);
  t.same(kept, originSaid, 'override_origin false: the origin\'s CORS answer stands');
});

t.test('listed origins: Vary: Origin on every answer, the allowed Origin echoed with credentials', async (t) => {
  const c = cors({ allow_origins: ['https://app.example'], allow_credentials: true, expose_headers: ['X-Id'] });
  t.equal(c.perRequest, true);
  const head = ['vary', 'Accept-Encoding'];
  addStaticCors(c, head.slice(), head);
  t.same(head, ['vary', 'Accept-Encoding, Origin']);
  const base = ['content-type', 'text/plain'];
  t.equal(addRequestCors(c, undefined, base), base, 'no Origin: the same list');
  t.equal(addRequestCors(c, 'https://evil.example', base), base, 'not allowed: the same list');
  t.same(addRequestCors(c, 'https://app.example', base), [
    'content-type', 'text/plain', 'access-control-allow-origin', 'https://app.example', 'access-control-allow-credentials', 'true', 'access-control-expose-headers', 'X-Id',
  ]);
  t.same(base, ['content-type', 'text/plain'], 'never edited in place');
  const keep = cors({ allow_origins: ['https://app.example'], override_origin: false });
  const originSaid = ['access-control-allow-origin', '*'];
  t.equal(addRequestCors(keep, 'https://app.example', originSaid), originSaid);
});

t.test('preflights: 204 with methods, headers and max age; 403 for an origin, method or header not allowed; null when not a preflight', async (t) => {
  const c = cors({ allow_origins: ['https://app.example'], allow_methods: ['PUT', 'delete'], allow_headers: ['X-Token'], max_age_seconds: 300 });
  const ask = (h: Record<string, string>) => preflightAnswer(c, h);
  t.equal(ask({ origin: 'https://app.example' }), null, 'no Access-Control-Request-Method');
  t.equal(ask({ 'access-control-request-method': 'PUT' }), null, 'no Origin');
  const ok = ask({ origin: 'https://app.example', 'access-control-request-method': 'put', 'access-control-request-headers': 'X-Token' })!;
  t.equal(ok.status, 204);
  t.same(ok.headers, [
    'access-control-allow-methods', 'PUT, DELETE', 'vary', 'Access-Control-Request-Method, Access-Control-Request-Headers', 'content-length', '0',
    'access-control-allow-headers', 'x-token', 'access-control-max-age', '300',
  ]);
  t.equal(ask({ origin: 'https://app.example', 'access-control-request-method': 'POST' })!.status, 204, 'a CORS-safelisted method needs no listing');
  t.equal(ask({ origin: 'https://app.example', 'access-control-request-method': 'PATCH' })!.status, 403);
  t.equal(ask({ origin: 'https://app.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'x-token, x-other' })!.status, 403);
  const refused = ask({ origin: 'https://evil.example', 'access-control-request-method': 'PUT' })!;
  t.equal(refused.status, 403);
  t.notOk(refused.headers.some((h) => h.startsWith('access-control-allow')), 'no CORS fields on a refusal');
  const star = cors({ allow_origins: ['https://app.example'], allow_headers: ['*'], allow_credentials: true });
  t.equal(preflightAnswer(star, { origin: 'https://app.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'a, b' })!.headers[7], 'a, b',
    'with credentials "*" is not a wildcard to browsers: the requested headers are echoed');
});
