// Regression: dot segments and encoded dots escaped the origin's path_prefix.
// "/../secret", "/a/../../secret" and "/%2e%2e/secret" reached the origin as
// "/public/../secret", which an origin that normalises serves from outside
// /public. The agent now normalises the path once (percent-encoded unreserved
// characters decoded, RFC 3986 §5.2.4 remove_dot_segments) before routing,
// keying and forwarding, and refuses what it cannot normalise safely.
import t from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('dot segments are removed before the path is prefixed and forwarded', async (t) => {
  const origin = await startOrigin((req, res) => res.end(`origin saw ${req.url}`));
  const edge = await startAgent(snapshotFor(origin.port, { origin: { path_prefix: '/public' } }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const get = (target: string) => rawRequest(edge.port, [`GET ${target} HTTP/1.1`, `Host: ${HOST}`, 'Connection: close']);

  const cases: [string, string][] = [
    ['/../secret', '/public/secret'],
    ['/a/../../secret', '/public/secret'],
    ['/%2e%2e/secret', '/public/secret'],
    ['/%2E%2E/%2e/secret', '/public/secret'],
    ['/.%2e/secret?x=1', '/public/secret?x=1'],
    ['/a/b/../c/./d', '/public/a/c/d'],
    ['/a/..', '/public/'],
    ['/%7Euser/%41%62c', '/public/~user/Abc'],
    ['/x%3fy/%e2%82%ac', '/public/x%3Fy/%E2%82%AC'],
  ];
  for (const [target, expected] of cases) {
    const r = await get(target);
    t.equal(r.status, 200, target);
    t.equal(r.body, `origin saw ${expected}`, `${target} → ${expected}`);
  }
  t.notOk(origin.requests.some((r) => /\.\.|%2e/i.test(r.url)), 'no dot segment ever reached the origin');
});

t.test('what cannot be normalised safely is refused with 400', async (t) => {
  const origin = await startOrigin((req, res) => res.end(`origin saw ${req.url}`));
  const edge = await startAgent(snapshotFor(origin.port, { origin: { path_prefix: '/public' } }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const get = (target: string) => rawRequest(edge.port, [`GET ${target} HTTP/1.1`, `Host: ${HOST}`, 'Connection: close']);
  for (const target of ['/a%2f..%2f..%2fsecret', '/a%2F..', '/a%00b', '/a%5c..%5csecret', '/a\\..\\secret', '/static/..;/secret', '/a/.;x/b', '/a%zz', '/a%4', '/a#frag', '*']) {
    t.equal((await get(target)).status, 400, target);
  }
  t.equal(origin.count(), 0, 'nothing reached the origin');
});
