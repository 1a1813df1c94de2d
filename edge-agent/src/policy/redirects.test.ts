// Redirects at the edge: the match_path compiler both sides share (captures,
// what it refuses), and the policy (endpoint http→https, route rules in order,
// Location with captures and the query, no open redirect through "//").
import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { endpointSnapshot, type EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileRedirectPattern, expandRedirectTarget, redirectRuleProblems } from '../../../shared/src/match/redirect.ts';
import type { PolicyAnswer, PolicyRequest } from './index.ts';
import { compileRedirects } from './redirects.ts';

function captures(pattern: string, path: string): string[] | null {
  const c = compileRedirectPattern(pattern);
  if ('problem' in c) throw new Error(c.problem);
  const m = c.re.exec(path);
  return m === null ? null : m.slice(1);
}

t.test('match_path wildcards capture in order: * within a segment, ** and a trailing /* across, ? one character', async (t) => {
  t.same(captures('/old/*', '/old/a/b.mp4'), ['a/b.mp4'], 'a trailing /* covers everything below');
  t.same(captures('/old/*/x/*.mp4', '/old/a/x/c.mp4'), ['a', 'c']);
  t.same(captures('/old/*/x/*.mp4', '/old/a/b/x/c.mp4'), null, '* stays within its segment');
  t.same(captures('/docs/**/index.html', '/docs/a/b/index.html'), ['a/b']);
  t.same(captures('/v?/*', '/v2/list'), ['2', 'list']);
  t.same(captures('/{en,fr}/*', '/fr/page'), ['page'], 'alternatives do not capture');
  t.same(captures('/[ab]*', '/bee'), ['ee'], 'classes do not capture');
  t.same(captures('/[!ab]x', '/cx'), [], 'a negated class');
  t.same(captures('/exact.html', '/exact.html'), []);
  t.same(captures('/exact.html', '/exactxhtml'), null, '"." is literal');
  t.same(captures('*', '/any/thing'), ['/any/thing']);
  t.equal((compileRedirectPattern('/a/*/b/**') as { captures: number }).captures, 2);
});

t.test('what the edge cannot answer is a problem naming the field (the control plane answers 422 with it)', async (t) => {
  const problems = (rule: Partial<Parameters<typeof redirectRuleProblems>[0]>) =>
    redirectRuleProblems({ type: 'path', status_code: 301, match_path: '/*', redirect_to: '/x', ...rule }).map((p) => p.field);
  t.same(problems({}), []);
  t.same(problems({ match_path: '/old/*', redirect_to: 'https://example.com/new/$1' }), []);
  t.same(problems({ match_path: '/old', redirect_to: '/new/$1' }), ['redirect_to'], '$1 without a wildcard');
  t.same(problems({ match_path: '/a/*', redirect_to: '/b/$2' }), ['redirect_to']);
  t.same(problems({ redirect_to: '/b/$0' }), ['redirect_to']);
  t.same(problems({ match_path: '/a/*', redirect_to: 'https://$1.example.com/' }), ['redirect_to'], 'a capture may not choose the host');
  t.same(problems({ match_path: 'old/*' }), ['match_path']);
  t.same(problems({ match_path: '/a/{x,*}' }), ['match_path']);
  t.same(problems({ match_path: '/a/{x' }), ['match_path']);
  t.same(problems({ match_path: '/a/[x' }), ['match_path']);
  t.same(problems({ match_path: '/a/x]' }), ['match_path']);
  t.same(problems({ match_path: '/a b' }), ['match_path']);
  t.same(problems({ redirect_to: 'ftp://x/' }), ['redirect_to']);
  t.same(problems({ type: 'teleport' }), ['type']);
  t.same(problems({ status_code: 304 }), ['status_code']);
  t.same(problems({ type: 'http_to_https', redirect_to: '/x' }), ['redirect_to']);
  t.same(problems({ type: 'http_to_https', redirect_to: '' }), []);
});

t.test('captures fill redirect_to; a leading "//" cannot send the viewer to another host', async (t) => {
  const c = compileRedirectPattern('/go/*') as { re: RegExp };
  t.equal(expandRedirectTarget('/new/$1', c.re.exec('/go/a/b')!), '/new/a/b');
  t.equal(expandRedirectTarget('/$1', c.re.exec('/go//evil.example/x')!), '/evil.example/x');
  t.equal(expandRedirectTarget('https://example.com/$1', c.re.exec('/go/x')!), 'https://example.com/x');
});

function endpoint(extra: Record<string, unknown>): EndpointSnapshot {
  return endpointSnapshot.parse({ id: 'ep', hostname: 'cdn.test', default_origin_id: 'o1', origins: [{ id: 'o1', host: 'origin.test' }], ...extra });
}

function request(path: string, query = '', options: { routeId?: string; secure?: boolean; method?: string } = {}): PolicyRequest {
  return {
    req: { method: options.method ?? 'GET' } as IncomingMessage, endpoint: { id: 'ep', snapshot: {} as never }, host: 'cdn.test', path,
    query, rawQuery: query, client: null, clientIp: '', secure: options.secure ?? false, routeId: options.routeId ?? '',
  };
}

const location = (a: PolicyAnswer | null) => (a === null ? null : { status: a.status, location: a.headers[a.headers.indexOf('location') + 1] });

t.test('tls_config.http_to_https_redirect: every plain-HTTP request, to the same URL on https (308 keeps a POST a POST)', async (t) => {
  const policy = compileRedirects(endpoint({ tls_config: { http_to_https_redirect: true } }))!;
  t.same(location(policy(request('/a/b', 'x=1&token=abc'))), { status: 301, location: 'https://cdn.test/a/b?x=1&token=abc' });
  t.same(location(policy(request('/a', '', { method: 'HEAD' }))), { status: 301, location: 'https://cdn.test/a' });
  t.same(location(policy(request('/upload', '', { method: 'POST' }))), { status: 308, location: 'https://cdn.test/upload' });
  t.equal(policy(request('/a', '', { secure: true })), null, 'a viewer already on TLS is not redirected');
});

t.test('route rules: only the matched route\'s, in order, the first matching answering', async (t) => {
  const policy = compileRedirects(endpoint({
    routes: [
      { id: 'r1', origin_id: 'o1', redirect_rules: [
        { type: 'path', status_code: 302, match_path: '/old/*', redirect_to: '/new/$1' },
        { type: 'path', status_code: 301, match_path: '/old/special', redirect_to: '/never' },
        { type: 'http_to_https', status_code: 308, match_path: '/secure/*' },
        { type: 'path', match_path: '/promo/*', redirect_to: 'https://shop.example.com/p/$1?src=cdn' },
      ] },
      { id: 'r2', origin_id: 'o1', redirect_rules: [{ type: 'path', match_path: '/*', redirect_to: '/r2' }] },
    ],
  }))!;
  t.same(location(policy(request('/old/a/b.mp4', 'q=1', { routeId: 'r1' }))), { status: 302, location: '/new/a/b.mp4?q=1' }, 'the query as sent follows');
  t.same(location(policy(request('/old/special', '', { routeId: 'r1' }))), { status: 302, location: '/new/special' }, 'the first matching rule wins');
  t.same(location(policy(request('/secure/x', 'a=b', { routeId: 'r1' }))), { status: 308, location: 'https://cdn.test/secure/x?a=b' });
  t.equal(policy(request('/secure/x', '', { routeId: 'r1', secure: true })), null, 'already https: the rule does not apply');
  t.same(location(policy(request('/promo/shoes', 'q=1', { routeId: 'r1' }))), { status: 301, location: 'https://shop.example.com/p/shoes?src=cdn' }, 'a target with its own query keeps it');
  t.equal(policy(request('/elsewhere', '', { routeId: 'r1' })), null);
  t.equal(policy(request('/old/a', '', { routeId: '' })), null, 'the default route has no rules');
  t.same(location(policy(request('/old/a', '', { routeId: 'r2' }))), { status: 301, location: '/r2' });
});

t.test('no redirects configured: no policy; a rule the edge cannot answer refuses the configuration', async (t) => {
  t.equal(compileRedirects(endpoint({})), null);
  t.equal(compileRedirects(endpoint({ routes: [{ id: 'r1', origin_id: 'o1', enabled: false, redirect_rules: [{ type: 'path', redirect_to: '/x' }] }] })), null, 'disabled routes do not count');
  t.throws(() => compileRedirects(endpoint({ routes: [{ id: 'r1', origin_id: 'o1', redirect_rules: [{ type: 'path', match_path: '/a', redirect_to: '/b/$1' }] }] })), /route r1: redirect_rules\[0\]\.redirect_to/);
});
