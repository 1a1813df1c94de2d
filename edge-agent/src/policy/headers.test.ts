// A header policy compiled: the order of its response edits (removals,
// security headers, custom headers, CORS), override true and false, the
// request edits, and the refusal of a policy the edge could not send.
import t from 'tap';
import { responseHeadersPolicySnapshot } from '../../../shared/src/config/snapshot.ts';
import { applyRequestEdits, compileHeaderPolicy, shapeByPolicy } from './headers.ts';

const policy = (p: Record<string, unknown>) => compileHeaderPolicy(responseHeadersPolicySnapshot.parse({ id: 'p', ...p }));

t.test('removals first, then security headers, then custom headers; override false only fills', async (t) => {
  const p = policy({
    security_headers: {
      strict_transport_security: { enabled: true, max_age_seconds: 600 },
      x_frame_options: { enabled: true, value: 'SAMEORIGIN', override: false },
      x_content_type_options: { enabled: false },
      content_security_policy: { enabled: true, policy: "default-src 'none'" },
    },
    custom_response_headers: [{ name: 'X-Frame-Options', value: 'DENY' }, { name: 'Server', value: 'edge', override: false }, { name: 'X-New', value: '1' }],
    remove_response_headers: ['X-Powered-By', 'Strict-Transport-Security'],
  });
  const origin = ['x-powered-by', 'php', 'strict-transport-security', 'max-age=1', 'server', 'nginx', 'x-new', 'old', 'x-new', 'older', 'content-type', 'text/html'];
  t.same(shapeByPolicy(p, origin), [
    'server', 'nginx', 'content-type', 'text/html',
    'strict-transport-security', 'max-age=600', 'content-security-policy', "default-src 'none'", 'x-frame-options', 'DENY', 'x-new', '1',
  ], 'the custom X-Frame-Options (override true) wins over the security header; every line of a replaced field goes');
  t.same(shapeByPolicy(p, []), [
    'strict-transport-security', 'max-age=600', 'content-security-policy', "default-src 'none'", 'x-frame-options', 'DENY', 'x-new', '1', 'server', 'edge',
  ]);
  t.equal(origin.length, 12, 'the input list is not edited');
});

t.test('every security header of the spec, with its options', async (t) => {
  const p = policy({
    security_headers: {
      strict_transport_security: { enabled: true, max_age_seconds: 31536000, include_subdomains: true, preload: true },
      content_security_policy: { enabled: true, policy: "default-src 'self'", report_only: true },
      x_content_type_options: { enabled: true },
      x_frame_options: { enabled: true },
      referrer_policy: { enabled: true },
      permissions_policy: { enabled: true, policy: 'geolocation=()' },
      x_xss_protection: { enabled: true, value: '1; mode=block' },
    },
  });
  t.same(shapeByPolicy(p, []), [
    'strict-transport-security', 'max-age=31536000; includeSubDomains; preload',
    'content-security-policy-report-only', "default-src 'self'",
    'x-content-type-options', 'nosniff',
    'x-frame-options', 'DENY',
    'referrer-policy', 'strict-origin-when-cross-origin',
    'permissions-policy', 'geolocation=()',
    'x-xss-protection', '1; mode=block',
  ]);
});

t.test('request edits: removed, replaced, filled only when missing', async (t) => {
  const p = policy({ custom_request_headers: [{ name: 'X-Tenant', value: 'acme' }, { name: 'X-Device', value: 'desktop', override: false }], remove_request_headers: ['Cookie'] });
  const fields: Record<string, string | string[] | undefined> = { cookie: 'a=1', 'x-tenant': 'other', 'x-device': 'phone' };
  applyRequestEdits(p.request!, fields);
  t.same(fields, { 'x-tenant': 'acme', 'x-device': 'phone' });
  const bare: Record<string, string | string[] | undefined> = {};
  applyRequestEdits(p.request!, bare);
  t.same(bare, { 'x-tenant': 'acme', 'x-device': 'desktop' });
  t.equal(policy({}).request, null, 'nothing to do: no edits');
});

t.test('a policy the edge could not send refuses the configuration, naming the field', async (t) => {
  t.throws(() => policy({ cors: { enabled: true, allow_credentials: true } }), /cors\.allow_credentials/);
  t.throws(() => policy({ custom_response_headers: [{ name: 'X-Bad', value: 'a\r\nSet-Cookie: x=1' }] }), /custom_response_headers\[0\]\.value/);
  t.throws(() => policy({ custom_response_headers: [{ name: 'Bad Name', value: 'x' }] }), /custom_response_headers\[0\]\.name/);
  t.throws(() => policy({ remove_response_headers: ['Content-Length'] }), /remove_response_headers\[0\]/);
  t.throws(() => policy({ security_headers: { x_frame_options: { enabled: true, value: 'ALLOWALL' } } }), /x_frame_options\.value/);
  t.throws(() => policy({ cors: { enabled: true, allow_origins: ['example.com'] } }), /cors\.allow_origins\[0\]/);
});
