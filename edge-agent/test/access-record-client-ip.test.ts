// The access record's client_ip is the viewer the request policies see: behind
// a trusted proxy the address its header reports, on every endpoint (before,
// only endpoints with an IP rule, a geo restriction or an IP-bound key got it,
// the others logged the proxy's address), and always in canonical form (an
// IPv4-mapped IPv6 address as IPv4, IPv6 as RFC 5952 text). Read from an HTTP
// log drain at a local receiver, with the agent listening dual-stack so the
// socket reports IPv4 peers as ::ffff:a.b.c.d.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EdgeAgent } from '../src/agent.ts';
import { trustedProxy } from '../src/policy/client-address.ts';
import { eventually } from '../../test/support/eventually.ts';
import { bodyText, startReceiver } from '../../test/support/log-receivers.ts';
import { startOrigin } from './helpers.ts';

const origin = await startOrigin((_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
  res.end('ok');
});
t.teardown(() => origin.close());
const receiver = await startReceiver(t);

const endpoint = (id: string, hostname: string, extra: Record<string, unknown> = {}) => ({
  id, hostname, default_origin_id: `${id}-o`,
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
  ...extra,
});
const dataDir = mkdtempSync(join(tmpdir(), 'edge-client-ip-'));
const agent = new EdgeAgent({
  dataDir, memoryBytes: 16 * 1024 * 1024, maxObjectBytes: 1024 * 1024, healthProbes: false, logDrains: { flushIntervalMs: 20 },
  trustedProxy: trustedProxy('x-forwarded-for', '127.0.0.1/32'),
});
agent.applyConfig({
  version: 1,
  endpoints: [
    endpoint('plain', 'plain.test'),
    endpoint('ruled', 'ruled.test', { ip_rules: [{ id: 'r1', action: 'allow', cidr: '0.0.0.0/0', priority: 1 }] }),
  ],
  log_drains: [{ id: 'd1', destination_type: 'http', destination_config: { url: `${receiver.url}/in`, allow_private_network: true }, log_format: 'ndjson', fields: ['client_ip', 'host', 'path', 'status'] }],
});
const { port } = await agent.listen(0, '::');
t.teardown(async () => {
  await agent.close(1000);
  rmSync(dataDir, { recursive: true, force: true });
});

function get(address: string, host: string, path: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    request({ host: address, port, path, headers: { host, ...headers }, agent: false }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode!));
    }).on('error', reject).end();
  });
}

type Line = { client_ip: string; host: string; path: string; status: number };
const lines = (): Line[] => receiver.requests.flatMap((r) => bodyText(r).trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line));
async function recorded(path: string): Promise<Line> {
  await eventually(() => lines().some((l) => l.path === path), `the access record of ${path}`);
  return lines().find((l) => l.path === path)!;
}

t.test('behind a trusted proxy the record carries the viewer its header reports, on an endpoint with no IP policy as on one with', async (t) => {
  t.equal(await get('127.0.0.1', 'plain.test', '/v4', { 'x-forwarded-for': '203.0.113.7' }), 200);
  t.equal((await recorded('/v4')).client_ip, '203.0.113.7', 'no IP rule, geo restriction or bound key: still the viewer, not the proxy');
  t.equal(await get('127.0.0.1', 'ruled.test', '/ruled', { 'x-forwarded-for': '203.0.113.8' }), 200);
  t.equal((await recorded('/ruled')).client_ip, '203.0.113.8', 'with an IP rule: the same viewer the rule judged');
  t.equal(await get('127.0.0.1', 'plain.test', '/chain', { 'x-forwarded-for': '198.51.100.1, 203.0.113.9' }), 200);
  t.equal((await recorded('/chain')).client_ip, '203.0.113.9', 'a list: the rightmost entry that is not a trusted proxy');
});

t.test('the recorded address is canonical: no ::ffff: prefix, IPv6 in RFC 5952 text', async (t) => {
  t.equal(await get('127.0.0.1', 'plain.test', '/mapped', { 'x-forwarded-for': '::ffff:198.51.100.9' }), 200);
  t.equal((await recorded('/mapped')).client_ip, '198.51.100.9', 'a v4-mapped address from the header is IPv4');
  t.equal(await get('127.0.0.1', 'plain.test', '/six', { 'x-forwarded-for': '2001:DB8:0:0::7' }), 200);
  t.equal((await recorded('/six')).client_ip, '2001:db8::7');
  t.equal(await get('127.0.0.1', 'plain.test', '/peer'), 200);
  t.equal((await recorded('/peer')).client_ip, '127.0.0.1', 'no header: the proxy itself, as IPv4 though the dual-stack socket says ::ffff:127.0.0.1');
});

t.test('a header from a peer outside TRUSTED_PROXY_CIDRS counts for nothing: the peer is recorded', async (t) => {
  t.equal(await get('::1', 'plain.test', '/untrusted', { 'x-forwarded-for': '203.0.113.66' }), 200);
  t.equal((await recorded('/untrusted')).client_ip, '::1');
  t.equal(await get('127.0.0.1', 'plain.test', '/malformed', { 'x-forwarded-for': 'not-an-address' }), 200);
  t.equal((await recorded('/malformed')).client_ip, '127.0.0.1', 'a malformed header from the trusted proxy: its own address');
});
