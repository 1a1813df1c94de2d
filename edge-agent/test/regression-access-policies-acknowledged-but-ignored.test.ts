// Regression (issue 22): a configuration carrying a signing key with token
// authentication and an IP rule blocking 127.0.0.0/8 was applied (and
// acknowledged) but had no effect: unsigned URLs, `?token=garbage` and the
// blocked address all got 200 from the origin, because the request policies
// compiled to nothing. The same configuration must now refuse all three.
import t from 'tap';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { snapshotFor, startAgent, startOrigin } from './helpers.ts';

const SECRET = 'the-operators-signing-secret-0123456789-abcdef';

t.test('a signing key with token authentication, and an IP rule blocking 127.0.0.0/8, take effect once applied', async (t) => {
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=60' });
    res.end('protected content');
  });
  const signedOnly = snapshotFor(origin.port, { endpoint: { signing_keys: [{ id: 'k1', secrets: [{ secret: SECRET }] }] } });
  const edge = await startAgent(signedOnly);
  t.teardown(async () => { await edge.close(); await origin.close(); });

  t.equal((await edge.get('/video.mp4')).status, 403, 'an unsigned URL');
  t.equal((await edge.get('/video.mp4?token=garbage&expires=9999999999')).status, 403, 'a garbage token');
  t.equal((await edge.get(signPath({ path: '/video.mp4', expires: Math.floor(Date.now() / 1000) + 60, secret: SECRET }))).status, 200, 'a signed URL');

  edge.agent.applyConfig({ ...signedOnly, version: 2, endpoints: [{ ...signedOnly.endpoints[0], ip_rules: [{ id: 'r1', action: 'block', cidr: '127.0.0.0/8' }] }] });
  t.equal((await edge.get(signPath({ path: '/video.mp4', expires: Math.floor(Date.now() / 1000) + 60, secret: SECRET }))).status, 403, 'the blocked address, even signed');
  t.equal(origin.requests.length, 1, 'only the signed request before the block reached the origin');
});
