// Regression: Vary poisoning via Connection. "Connection: close, accept-language"
// with "Accept-Language: fr" made the agent strip Accept-Language for the origin
// (a Connection-listed field is hop-by-hop) but key the stored variant as "fr",
// so French viewers got the page the origin made for no language. Hop-by-hop
// and Connection-listed fields are now removed before the cache key and the
// Vary values are computed.
import t from 'tap';
import { HOST, rawRequest, snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('a Connection-listed field counts as absent for Vary, as it is for the origin', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=600', vary: 'Accept-Language' });
    res.end(`lang=${req.headers['accept-language'] ?? 'none'}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const attack = await rawRequest(edge.port, ['GET /v HTTP/1.1', `Host: ${HOST}`, 'Connection: close, accept-language', 'Accept-Language: fr']);
  t.equal(attack.body, 'lang=none', 'the origin did not receive the Connection-listed field');
  t.equal(origin.requests[0].headers['accept-language'], undefined);

  const french = await rawRequest(edge.port, ['GET /v HTTP/1.1', `Host: ${HOST}`, 'Accept-Language: fr', 'Connection: close']);
  t.equal(french.body, 'lang=fr', 'a French viewer gets the French page');
  t.equal(french.headers['x-cache-status'], 'MISS', 'it was never stored under fr');

  const none = await rawRequest(edge.port, ['GET /v HTTP/1.1', `Host: ${HOST}`, 'Connection: close']);
  t.equal(none.body, 'lang=none');
  t.equal(none.headers['x-cache-status'], 'HIT', 'the attacker\'s response is the variant for no Accept-Language');
});

t.test('a Connection-listed cache-key field is not part of the key', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=600' });
    res.end(`device=${req.headers['x-device'] ?? 'none'}`);
  });
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [{ id: 'r', ttl_seconds: 60, cache_key: { include_headers: ['X-Device'] } }] }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const attack = await rawRequest(edge.port, ['GET /k HTTP/1.1', `Host: ${HOST}`, 'X-Device: tv', 'Connection: x-device, close']);
  t.equal(attack.body, 'device=none');
  const tv = await rawRequest(edge.port, ['GET /k HTTP/1.1', `Host: ${HOST}`, 'X-Device: tv', 'Connection: close']);
  t.equal(tv.body, 'device=tv', 'the tv variant was not poisoned');
});
