// The country traffic is counted under comes from the viewer's address. The
// agent looks it up once per HTTP/1.1 connection when the viewer is the
// socket's peer; behind a trusted proxy each request names its own viewer, so
// requests on one keep-alive connection from different countries are counted
// apart (regression: a per-connection lookup must not apply there).
import t from 'tap';
import { Client } from 'undici';
import { trustedProxy } from '../src/policy/client-address.ts';
import { HOST, snapshotFor, startAgent, startOrigin } from './helpers.ts';

const origin = await startOrigin((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
  res.end('ok');
});
t.teardown(() => origin.close());

/** The countries of the agent's traffic rollups, summed over windows: { code: requests }. */
function countries(agent: { traffic: { takeRollups: () => { countries: { countryCode: string; requests: number }[] }[] } }): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of agent.traffic.takeRollups()) for (const c of r.countries) out[c.countryCode] = (out[c.countryCode] ?? 0) + c.requests;
  return out;
}

// Addresses the packaged GeoLite2 country ranges place: 8.8.8.0/24 in US, 1.0.1.0/24 in CN.
t.test('behind a trusted proxy, one connection carrying viewers of two countries counts each request under its own', async (t) => {
  const a = await startAgent(snapshotFor(origin.port), { trustedProxy: trustedProxy('x-forwarded-for', '127.0.0.1/32') });
  t.teardown(() => a.close());
  const client = new Client(`http://127.0.0.1:${a.port}`, { pipelining: 1 });
  t.teardown(() => client.close());
  for (const viewer of ['8.8.8.8', '1.0.1.1', '8.8.8.8', '1.0.1.1', '1.0.1.1']) {
    const res = await client.request({ path: '/x', method: 'GET', headers: { host: HOST, 'x-forwarded-for': viewer } });
    await res.body.text();
    t.equal(res.statusCode, 200);
  }
  t.same(countries(a.agent), { US: 2, CN: 3 });
});

t.test('without a trusted proxy the socket\'s peer is the viewer: a forwarded-for header changes nothing', async (t) => {
  const a = await startAgent(snapshotFor(origin.port));
  t.teardown(() => a.close());
  const client = new Client(`http://127.0.0.1:${a.port}`, { pipelining: 1 });
  t.teardown(() => client.close());
  for (const viewer of ['8.8.8.8', '1.0.1.1']) {
    const res = await client.request({ path: '/x', method: 'GET', headers: { host: HOST, 'x-forwarded-for': viewer } });
    await res.body.text();
  }
  t.same(countries(a.agent), {}, 'loopback has no country, whatever the header says');
});
