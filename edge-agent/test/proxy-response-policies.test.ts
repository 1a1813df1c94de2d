// The response-policy seam: every answer of an endpoint (miss, hit, 304, 206
// and 416 from cache, origin errors, pass-through, refusals after the endpoint
// is known) leaves through the exit that runs the endpoint's response policies,
// which may change status, headers and body. A policy edits a private copy of
// the head: a cached object's shared header list is never changed.
import t from 'tap';
import type { PolicyResponse } from '../src/policy/index.ts';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('response policies see and may change every answer of the endpoint', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/missing') {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('origin 404');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=600', etag: '"e1"' });
    res.end('0123456789');
  });
  const edge = await startAgent(snapshotFor(origin.port, { routes: [{ id: 'dead', origin_id: 'o2', match: { paths: ['/dead/*'] } }], origins: [{ id: 'o2', scheme: 'http', host: '127.0.0.1', port: 1, allow_private_network: true, max_retries: 0 }] }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const seen: string[] = [];
  const policy = (r: PolicyResponse) => {
    seen.push(`${r.status} ${r.cacheStatus} ${r.path}`);
    r.headers.push('x-policy', 'on');
    if (r.status === 404) {
      r.status = 410;
      r.body = 'custom page';
      const i = r.headers.indexOf('content-length');
      if (i !== -1) r.headers.splice(i, 2);
    }
  };
  edge.agent.routing.byId.get('ep1')!.responsePolicies.hooks.push(policy);

  const miss = await edge.get('/doc');
  const hit = await edge.get('/doc');
  const again = await edge.get('/doc');
  t.same([miss.headers['x-cache-status'], hit.headers['x-cache-status'], again.headers['x-cache-status']], ['MISS', 'HIT', 'HIT']);
  t.equal(again.headers['x-policy'], 'on', 'one x-policy: the cached object\'s header list was not edited in place');
  t.equal((await edge.get('/doc', { 'if-none-match': '"e1"' })).status, 304);
  t.equal((await edge.get('/doc', { range: 'bytes=2-4' })).body, '234');
  t.equal((await edge.get('/doc', { range: 'bytes=50-60' })).status, 416);
  const replaced = await edge.get('/missing');
  t.equal(replaced.status, 410, 'a policy may change the status');
  t.equal(replaced.body, 'custom page', 'and replace the body');
  t.equal((await edge.get('/dead/x')).status, 502);
  t.equal((await rawRequest(edge.port, ['GET /a%2fb HTTP/1.1', `Host: ${HOST}`, 'Connection: close'])).headers['x-policy'], 'on', 'a refusal after the endpoint is known');
  t.equal((await edge.get('/doc', { host: 'unknown.test' })).headers['x-policy'], undefined, 'no endpoint, no endpoint policies');
  t.same(seen, [
    '200 MISS /doc', '200 HIT /doc', '200 HIT /doc', '304 HIT /doc', '206 HIT /doc', '416 HIT /doc',
    '404 MISS /missing', '502 MISS /dead/x', '400 BYPASS /a%2fb',
  ]);
});
