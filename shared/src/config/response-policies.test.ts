// The rules both sides run on response headers policies and error pages: the
// control plane's 422 and the agent's refusal of a configuration come from
// these, so each rule is shown here once, on the API's complete record and on
// a snapshot entry with members left out.
import t from 'tap';
import { errorPageProblems, headerPolicyProblems, type HeaderPolicyValues } from './response-policies.ts';
import { responseHeadersPolicySnapshot } from './snapshot.ts';

const fields = (p: Record<string, unknown>) => headerPolicyProblems(responseHeadersPolicySnapshot.parse({ id: 'p', ...p })).map((x) => x.field);

t.test('a snapshot entry with defaults only has no problem', async (t) => {
  t.same(fields({}), []);
});

t.test('CORS: credentials with "*", origins that are not origins, methods and headers that are not tokens', async (t) => {
  t.same(fields({ cors: { enabled: true, allow_credentials: true } }), ['cors.allow_credentials'], '"*" is the default origin list');
  t.same(fields({ cors: { enabled: false, allow_credentials: true } }), [], 'only while CORS is on');
  t.same(fields({ cors: { enabled: true, allow_credentials: true, allow_origins: ['https://app.example', 'https://*.cdn.example:8443'] } }), []);
  t.same(fields({ cors: { allow_origins: ['app.example', 'https://a.example/path', 'https://*'] } }), ['cors.allow_origins[0]', 'cors.allow_origins[1]', 'cors.allow_origins[2]']);
  t.same(fields({ cors: { allow_methods: ['GET', 'GE T'], allow_headers: ['*', 'X-Ok', 'x:bad'], expose_headers: ['a\nb'] } }),
    ['cors.allow_methods[1]', 'cors.allow_headers[2]', 'cors.expose_headers[0]']);
});

t.test('security headers: preload needs include_subdomains and a year; enabled CSP and permissions policy need a policy; values from their lists', async (t) => {
  t.same(fields({ security_headers: { strict_transport_security: { enabled: true, preload: true } } }), ['security_headers.strict_transport_security.preload']);
  t.same(fields({ security_headers: { strict_transport_security: { enabled: true, preload: true, include_subdomains: true, max_age_seconds: 31536000 } } }), []);
  t.same(fields({ security_headers: { content_security_policy: { enabled: true }, permissions_policy: { enabled: true, policy: '  ' } } }),
    ['security_headers.content_security_policy.policy', 'security_headers.permissions_policy.policy']);
  t.same(fields({ security_headers: { content_security_policy: { policy: "a\r\nb" } } }), ['security_headers.content_security_policy.policy'], 'a value node:http would refuse, even disabled');
  t.same(fields({ security_headers: { x_frame_options: { value: 'ALLOW-FROM x' }, referrer_policy: { value: 'never' }, x_xss_protection: { value: '2' } } }),
    ['security_headers.x_frame_options.value', 'security_headers.referrer_policy.value', 'security_headers.x_xss_protection.value']);
});

t.test('custom and removed headers: tokens, single lines, not the edge\'s own fields, not twice, not both set and removed', async (t) => {
  t.same(fields({
    custom_response_headers: [{ name: 'X-A', value: 'ok' }, { name: 'x-a', value: 'twice' }, { name: 'Transfer-Encoding', value: 'x' }, { name: 'B C', value: 'x' }, { name: 'X-V', value: 'a\u0000' }],
  }), ['custom_response_headers[1].name', 'custom_response_headers[2].name', 'custom_response_headers[3].name', 'custom_response_headers[4].value']);
  t.same(fields({ custom_request_headers: [{ name: 'X-Tenant', value: 'a' }], remove_request_headers: ['x-tenant', 'Host', 'X-Gone', 'x-gone'] }),
    ['remove_request_headers[1]', 'remove_request_headers[3]', 'custom_request_headers[0].name']);
  t.same(fields({ custom_response_headers: [{ name: 'X-Obs', value: 'caf\u00e9' }] }), [], 'obs-text is a valid field value');
  t.same(fields({ remove_response_headers: ['Content-Encoding'], custom_response_headers: [{ name: 'Content-Range', value: 'bytes 0-1/2' }] }),
    ['custom_response_headers[0].name', 'remove_response_headers[0]'], 'the edge compresses and cuts ranges: those fields are its own');
});

t.test('the API\'s complete record is checked by the same rules', async (t) => {
  const record: HeaderPolicyValues = {
    cors: { enabled: true, allow_origins: ['*'], allow_methods: ['GET'], allow_headers: [], expose_headers: [], allow_credentials: true, max_age_seconds: null, override_origin: true },
    security_headers: {}, custom_response_headers: [], custom_request_headers: [], remove_response_headers: [], remove_request_headers: [],
  };
  t.same(headerPolicyProblems(record).map((p) => p.field), ['cors.allow_credentials']);
});

t.test('error pages: absolute, normalisable paths on the origin, one page per code', async (t) => {
  const problems = (pages: { error_code: number; response_page_path: string }[]) => errorPageProblems(pages).map((p) => p.field);
  t.same(problems([{ error_code: 404, response_page_path: '/errors/404.html' }, { error_code: 500, response_page_path: '/errors/5xx.html?code=500' }]), []);
  t.same(problems([
    { error_code: 400, response_page_path: 'relative.html' }, { error_code: 401, response_page_path: '//evil.example/x' },
    { error_code: 402, response_page_path: '/a%2Fb' }, { error_code: 403, response_page_path: '/a b' }, { error_code: 403, response_page_path: '/x#frag' },
  ]), [
    'custom_error_pages[0].response_page_path', 'custom_error_pages[1].response_page_path', 'custom_error_pages[2].response_page_path',
    'custom_error_pages[3].response_page_path', 'custom_error_pages[4].response_page_path', 'custom_error_pages[4].error_code',
  ]);
});
