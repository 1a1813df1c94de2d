// Regression: the agent took the first of two Host fields (another hop may take
// the last) and routed absolute-form requests by the Host field instead of the
// target's own authority. RFC 9112 §3.2: more than one Host → 400; §3.2.2: a
// request in absolute form is routed by its own authority, and the Host field
// is replaced by it.
import t from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('two Host fields are refused with 400', async (t) => {
  const origin = await startOrigin((req, res) => res.end(`host=${req.headers.host}`));
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const two = await rawRequest(edge.port, ['GET /x HTTP/1.1', `Host: ${HOST}`, 'Host: other.test', 'Connection: close']);
  t.equal(two.status, 400);
  const same = await rawRequest(edge.port, ['GET /x HTTP/1.1', `Host: ${HOST}`, `host: ${HOST}`, 'Connection: close']);
  t.equal(same.status, 400, 'even when both say the same');
  t.equal(origin.count(), 0);
});

t.test('an absolute-form target is routed by its own authority, which is what the origin receives', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=60' });
    res.end(`${req.url} host=${req.headers.host}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const routed = await rawRequest(edge.port, [`GET http://${HOST}/abs?q=1 HTTP/1.1`, 'Host: other.test', 'Connection: close']);
  t.equal(routed.status, 200, 'cdn.test from the target wins over Host: other.test');
  t.equal(routed.body, `/abs?q=1 host=${HOST}`);
  t.equal(origin.requests[0].headers['x-forwarded-host'], HOST);

  const elsewhere = await rawRequest(edge.port, ['GET http://other.test/abs?q=1 HTTP/1.1', `Host: ${HOST}`, 'Connection: close']);
  t.equal(elsewhere.status, 421, 'a target naming a host this agent does not serve is misdirected, whatever Host says');

  const hit = await rawRequest(edge.port, ['GET /abs?q=1 HTTP/1.1', `Host: ${HOST}`, 'Connection: close']);
  t.equal(hit.headers['x-cache-status'], 'HIT', 'origin form and absolute form share the key');

  const badAuthority = await rawRequest(edge.port, [`GET http://${HOST}:x/abs HTTP/1.1`, `Host: ${HOST}`, 'Connection: close']);
  t.equal(badAuthority.status, 400, 'the target authority is validated like Host');
  const userinfo = await rawRequest(edge.port, [`GET http://user@${HOST}/abs HTTP/1.1`, `Host: ${HOST}`, 'Connection: close']);
  t.equal(userinfo.status, 400, 'userinfo in the target is refused');
  const badHost = await rawRequest(edge.port, [`GET http://${HOST}/abs HTTP/1.1`, `Host: ${HOST}:"x"`, 'Connection: close']);
  t.equal(badHost.status, 400, 'an invalid Host field is refused even when the target carries the authority');
  t.equal(origin.count(), 1);
});
