// Regression: cache poisoning through the port part of Host. The agent looked a
// request up under the normalised host ("cdn.test") but forwarded the raw Host
// ("cdn.test:\"><img ...>") as Host and X-Forwarded-Host, so an origin page
// echoing its host was stored and served to every later viewer of cdn.test.
// Now a malformed authority is refused with 400 and what the origin receives is
// exactly what was keyed: the normalised name, and a port only where the key
// holds it.
import t, { type Test } from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const POISON = 'cdn.test:"><img src=x onerror=alert(1)>';

async function setup(t: Test, origin?: Record<string, unknown>) {
  const server = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'max-age=600' });
    res.end(`<a href="//${req.headers.host}/next">next</a> xfh=${req.headers['x-forwarded-host'] ?? ''}`);
  });
  const edge = await startAgent(snapshotFor(server.port, { origin }));
  t.teardown(async () => { await edge.close(); await server.close(); });
  const get = (host: string, path = '/page') => rawRequest(edge.port, [`GET ${path} HTTP/1.1`, `Host: ${host}`, 'Connection: close']);
  return { server, edge, get };
}

t.test('a Host whose port is not a port is refused, and the clean page is what cdn.test viewers get', async (t) => {
  const { server, get } = await setup(t);
  const attack = await get(POISON);
  t.equal(attack.status, 400, 'malformed port: 400');
  t.equal(server.count(), 0, 'the origin never saw the poisoned Host');

  const viewer = await get(HOST);
  t.equal(viewer.status, 200);
  t.notMatch(viewer.body, /<img/, 'no injected markup');
  t.equal(viewer.body, `<a href="//${HOST}/next">next</a> xfh=${HOST}`);
  t.equal(server.requests[0].headers.host, HOST, 'the origin received the keyed host');
  t.equal(server.requests[0].headers['x-forwarded-host'], HOST);

  // Once stored, a second attempt cannot poison the stored page either.
  t.equal((await get(POISON)).status, 400);
  const again = await get(HOST);
  t.equal(again.headers['x-cache-status'], 'HIT');
  t.notMatch(again.body, /<img/);
});

t.test('malformed authorities are refused before anything reaches the origin', async (t) => {
  const { server, get } = await setup(t);
  const bad = [
    'cdn.test:', 'cdn.test:123456', 'cdn.test:80x', 'cdn.test:-1', 'cdn.test:8 0', 'cdn.test:70000',
    'cdn.test:80:80', 'user@cdn.test', 'cdn.test/evil', 'cdn test', 'cdn.test\\evil', '[::1', '[zz::1]', '[::1]x', 'cdn.test?', '"cdn.test"',
  ];
  for (const host of bad) t.equal((await get(host)).status, 400, `Host: ${host}`);
  t.equal(server.count(), 0, 'none was forwarded');
});

t.test('what is forwarded is what was keyed: case, trailing dot and default port normalised; a non-default port keyed and forwarded', async (t) => {
  const { server, get } = await setup(t);
  const a = await get('CDN.Test.:80');
  t.equal(a.status, 200);
  t.equal(server.requests[0].headers.host, HOST, 'name lower-cased, trailing dot and default port dropped');
  t.equal((await get(HOST)).headers['x-cache-status'], 'HIT', 'the same key as plain cdn.test');

  const b = await get(`${HOST}:8443`);
  t.equal(b.headers['x-cache-status'], 'MISS', 'a non-default port is part of the key');
  t.equal(server.requests[1].headers.host, `${HOST}:8443`, 'and is forwarded');
  t.equal(server.requests[1].headers['x-forwarded-host'], `${HOST}:8443`);
  t.equal(b.body, `<a href="//${HOST}:8443/next">next</a> xfh=${HOST}:8443`);
  t.equal((await get(HOST)).body, `<a href="//${HOST}/next">next</a> xfh=${HOST}`, 'port-less viewers keep their own page');
  t.equal(server.count(), 2);
});

t.test('without forward_host_header the viewer authority is not keyed, so it is not forwarded either', async (t) => {
  const { server, edge, get } = await setup(t, { forward_host_header: false });
  const first = await get(`${HOST}:8443`);
  t.equal(first.status, 200);
  t.equal(server.requests[0].headers.host, `127.0.0.1:${server.port}`, 'the origin host');
  t.equal(server.requests[0].headers['x-forwarded-host'], undefined, 'no viewer authority in X-Forwarded-Host');
  const viaHeader = await rawRequest(edge.port, ['GET /other HTTP/1.1', `Host: ${HOST}`, 'X-Forwarded-Host: evil.test', 'Connection: close']);
  t.equal(viaHeader.status, 200);
  t.equal(server.requests[1].headers['x-forwarded-host'], undefined, "a viewer's own X-Forwarded-Host is dropped too");
  t.equal((await get(HOST)).headers['x-cache-status'], 'HIT', 'one key whatever the port');
});
