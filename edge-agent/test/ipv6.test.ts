// IPv6 at the agent (issue 23 item 2), with real agent processes: by default
// (HOST ::) the data plane listens dual-stack, so viewers reach it over IPv6
// and IPv4, plain and TLS; HOST 0.0.0.0 is IPv4 only. An endpoint with
// ipv6_enabled false is answered 421 to a viewer arriving over IPv6 (directly,
// or as a trusted proxy reports it) and served over IPv4.
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAgentProcess, startOrigin } from './helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'edge-ipv6-'));
const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
  res.end(`origin ${req.url}`);
});
t.teardown(() => origin.close());
const endpoint = (id: string, hostname: string, ipv6: boolean) => ({
  id, hostname, default_origin_id: `${id}-o`, ipv6_enabled: ipv6,
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
});
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify({ version: 1, endpoints: [endpoint('both', 'both.test', true), endpoint('v4', 'v4only.test', false)] }));

function get(address: string, port: number, host: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request({ host: address, port, path: '/x', headers: { host, ...headers }, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode!, body }));
    }).on('error', reject).end();
  });
}

const reachable = (address: string, port: number) => new Promise<boolean>((resolve) => {
  const s = connect(port, address, () => { s.destroy(); resolve(true); });
  s.on('error', () => resolve(false));
});

t.test('dual-stack by default: IPv6 and IPv4 viewers, plain and TLS; ipv6_enabled false answers 421 over IPv6 only', async (t) => {
  const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'dual'), HOST: '::', TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32' });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);
  t.same(await get('127.0.0.1', agent.port, 'both.test'), { status: 200, body: 'origin /x' }, 'over IPv4');
  t.same(await get('::1', agent.port, 'both.test'), { status: 200, body: 'origin /x' }, 'over IPv6');
  t.ok(await reachable('::1', httpsPort), 'the HTTPS listener is dual-stack too');
  t.ok(await reachable('127.0.0.1', httpsPort));

  t.equal((await get('127.0.0.1', agent.port, 'v4only.test')).status, 200, 'ipv6_enabled false: served over IPv4');
  const refused = await get('::1', agent.port, 'v4only.test');
  t.same(refused, { status: 421, body: 'This endpoint is not served over IPv6\n' }, 'and not over IPv6');
  t.equal((await get('127.0.0.1', agent.port, 'v4only.test', { 'x-forwarded-for': '2001:db8::7' })).status, 421, 'a viewer the trusted proxy reports on IPv6: 421');
  t.equal((await get('127.0.0.1', agent.port, 'v4only.test', { 'x-forwarded-for': '::ffff:203.0.113.7' })).status, 200, 'a v4-mapped address is IPv4');
  t.equal((await get('::1', agent.port, 'v4only.test', { 'x-forwarded-for': '203.0.113.7' })).status, 421, 'a header from an untrusted peer counts for nothing');
});

t.test('HOST 0.0.0.0 listens on IPv4 only', async (t) => {
  const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'v4'), HOST: '0.0.0.0' });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  t.equal((await get('127.0.0.1', agent.port, 'both.test')).status, 200);
  t.notOk(await reachable('::1', agent.port), 'no IPv6 listener');
});
