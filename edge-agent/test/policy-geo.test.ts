// Geo restriction on a real agent process (--config-file) in front of a real
// origin, with the packaged country database: behind a trusted proxy, a viewer
// the database places in a blocked country is refused, one elsewhere is
// served, and an address with no country (loopback) is served; an allowlist
// refuses every other country.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { startAgentProcess, startOrigin } from './helpers.ts';

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
  res.end(`origin ${req.url}`);
});
const dir = mkdtempSync(join(tmpdir(), 'edge-geo-'));
const endpoint = (id: string, hostname: string, geo: Record<string, unknown>) => ({
  id, hostname, default_origin_id: `${id}-o`, geo_restriction: { enabled: true, ...geo },
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
});
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify({
  version: 1,
  endpoints: [
    endpoint('blocklist', 'block.test', { policy: 'blocklist', countries: ['CN'] }),
    endpoint('allowlist', 'allow.test', { policy: 'allowlist', countries: ['JP', 'US'] }),
  ],
}));
const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32' });
t.teardown(async () => {
  agent.child.kill('SIGKILL');
  await origin.close();
  rmSync(dir, { recursive: true, force: true });
});

async function get(host: string, viewer?: string) {
  const res = await request(`http://127.0.0.1:${agent.port}/x`, { headers: { host, ...(viewer ? { 'x-forwarded-for': viewer } : {}) } });
  return { status: res.statusCode, body: await res.body.text() };
}

// Addresses the packaged GeoLite2 country ranges place: 1.0.1.0/24 in CN, 8.8.8.0/24 in US, 2001:200::/32 in JP.
t.test('blocklist: a viewer in a blocked country is refused, others served, no country served', async (t) => {
  t.same(await get('block.test', '1.0.1.7'), { status: 403, body: 'Forbidden\n' });
  t.same(await get('block.test', '8.8.8.8'), { status: 200, body: 'origin /x' });
  t.equal((await get('block.test')).status, 200, 'loopback has no country');
  t.equal(origin.count('/x'), 2, 'two viewer requests reached the origin (its health probes go to its root)');
});

t.test('allowlist: only the listed countries (IPv4 and IPv6), and addresses with no country', async (t) => {
  t.equal((await get('allow.test', '8.8.8.8')).status, 200);
  t.equal((await get('allow.test', '2001:200::1')).status, 200);
  t.equal((await get('allow.test', '1.0.1.7')).status, 403);
  t.equal((await get('allow.test', '10.20.30.40')).status, 200, 'a private address has no country');
});
