// Regression: "ssrf_protection: false" alone switched the private-network guard
// off even though allow_private_network was false, so an origin on 127.0.0.1
// was reached. Private addresses are now refused unless the operator asked for
// them with allow_private_network: true.
import t from 'tap';
import { snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('ssrf_protection: false does not open private addresses without allow_private_network', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('private origin reached'));
  t.teardown(() => origin.close());
  for (const host of ['127.0.0.1', 'localhost']) {
    const edge = await startAgent(snapshotFor(origin.port, { origin: { host, allow_private_network: false, ssrf_protection: false } }));
    t.teardown(() => edge.close());
    const r = await edge.get('/x');
    t.equal(r.status, 502, `${host}: refused`);
    t.match(r.body, /not allowed/);
  }
  t.equal(origin.count(), 0, 'the origin was never contacted');

  const allowed = await startAgent(snapshotFor(origin.port, { origin: { allow_private_network: true, ssrf_protection: true } }));
  t.teardown(() => allowed.close());
  t.equal((await allowed.get('/y')).body, 'private origin reached', 'allow_private_network: true is what opens a private origin');
});
