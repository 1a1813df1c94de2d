// IP access rules on a real agent process (--config-file) listening on both
// families, in front of a real origin: an IPv6 block rule refuses ::1 and not
// 127.0.0.1; a default-deny endpoint serves only its allow rule; a forwarded
// address counts only from a trusted proxy; the challenge action's cookie; an
// endpoint with 1,000 rules and a signing key builds from a snapshot file and
// serves; refusals are counted by reason.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { startAgentProcess, startOrigin } from './helpers.ts';

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
  res.end(`origin ${req.headers.host} ${req.url}`);
});
const dir = mkdtempSync(join(tmpdir(), 'edge-ip-rules-'));
const SECRET = 'a-signing-secret-for-the-big-endpoint-0123456789';

const endpoint = (id: string, hostname: string, extra: Record<string, unknown>) => ({
  id, hostname, default_origin_id: `${id}-o`,
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
  ...extra,
});
const thousand = Array.from({ length: 1000 }, (_, i) => ({
  id: `big-${i}`, action: i === 999 ? 'allow' : 'block', cidr: i === 999 ? '198.18.0.0/15' : i % 2 === 0 ? `203.0.${i % 256}.0/24` : `2001:db8:${i.toString(16)}::/48`, priority: 1 + (i % 1000),
}));
const snapshot = {
  version: 3,
  endpoints: [
    endpoint('v6block', 'v6.test', { ip_rules: [{ id: 'no-v6-loopback', action: 'block', cidr: '::1/128', priority: 10 }] }),
    endpoint('deny', 'deny.test', { ip_default_action: 'deny', ip_rules: [{ id: 'only-v4-loopback', action: 'allow', cidr: '127.0.0.1/32' }] }),
    endpoint('challenge', 'challenge.test', { ip_rules: [{ id: 'suspicious', action: 'challenge', cidr: '203.0.113.0/24' }] }),
    endpoint('big', 'big.test', {
      ip_rules: thousand,
      signing_keys: [{ id: 'big-key', secrets: [{ secret: SECRET }] }],
    }),
  ],
};
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify(snapshot));
const agent = await startAgentProcess({
  CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), HOST: '::',
  TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32',
});
t.teardown(async () => {
  agent.child.kill('SIGKILL');
  await origin.close();
  rmSync(dir, { recursive: true, force: true });
});
const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);

async function get(from: '127.0.0.1' | '::1', host: string, path = '/x', headers: Record<string, string> = {}) {
  const address = from === '::1' ? '[::1]' : from;
  const res = await request(`http://${address}:${agent.port}${path}`, { headers: { host, ...headers } });
  return { status: res.statusCode, body: await res.body.text(), headers: res.headers };
}

t.test('an IPv6 block rule refuses a viewer on ::1 and serves one on 127.0.0.1', async (t) => {
  const blocked = await get('::1', 'v6.test');
  t.equal(blocked.status, 403);
  t.equal(blocked.body, 'Forbidden\n');
  t.equal(origin.requests.filter((r) => r.headers.host === 'v6.test').length, 0, 'the refused request never reached the origin');
  const served = await get('127.0.0.1', 'v6.test');
  t.equal(served.status, 200);
  t.equal(served.body, 'origin v6.test /x');
});

t.test('default deny: only what an allow rule holds is served; a forwarded address from an untrusted peer changes nothing', async (t) => {
  t.equal((await get('127.0.0.1', 'deny.test')).status, 200);
  t.equal((await get('::1', 'deny.test')).status, 403);
  t.equal((await get('::1', 'deny.test', '/x', { 'x-forwarded-for': '127.0.0.1' })).status, 403, '::1 is not a trusted proxy: its X-Forwarded-For is ignored');
  t.equal((await get('127.0.0.1', 'deny.test', '/x', { 'x-forwarded-for': '198.51.100.1' })).status, 403, 'from the trusted proxy, the forwarded viewer is the one judged');
});

t.test('challenge: a 403 page setting a cookie bound to the address; back with it, the viewer passes', async (t) => {
  const viewer = { 'x-forwarded-for': '203.0.113.5' };
  const first = await get('127.0.0.1', 'challenge.test', '/page', viewer);
  t.equal(first.status, 403);
  t.match(first.headers['content-type'], /text\/html/);
  t.match(first.body, /http-equiv="refresh"/);
  t.equal(first.headers['cache-control'], 'no-store');
  const setCookie = String(first.headers['set-cookie']);
  t.match(setCookie, /^__edge_challenge=\d+\.[A-Za-z0-9_-]+; Max-Age=3600; Path=\/; HttpOnly; SameSite=Lax$/);
  const cookie = setCookie.split(';')[0]!;
  const back = await get('127.0.0.1', 'challenge.test', '/page', { ...viewer, cookie: `a=1; ${cookie}` });
  t.equal(back.status, 200);
  t.equal(back.body, 'origin challenge.test /page');
  t.equal((await get('127.0.0.1', 'challenge.test', '/page', { 'x-forwarded-for': '203.0.113.6', cookie })).status, 403, 'the cookie of another address does not pass');
  t.equal((await get('127.0.0.1', 'challenge.test', '/page', { ...viewer, cookie: `${cookie.slice(0, -2)}xx` })).status, 403, 'nor a forged one');
  t.equal((await get('127.0.0.1', 'challenge.test', '/page')).status, 200, 'viewers outside the rule are not challenged');
});

t.test('1,000 rules and a signing key, from a snapshot file: the first matching rule by priority decides, then the signature', async (t) => {
  const signed = signPath({ path: '/v.mp4', expires: Math.floor(Date.now() / 1000) + 600, secret: SECRET });
  t.equal((await get('127.0.0.1', 'big.test', signed)).status, 200, 'no rule holds 127.0.0.1: allowed, and the URL is signed');
  t.equal((await get('127.0.0.1', 'big.test', '/v.mp4')).status, 403, 'unsigned');
  t.equal((await get('127.0.0.1', 'big.test', signed, { 'x-forwarded-for': '203.0.10.9' })).status, 403, 'inside a block rule');
  t.equal((await get('127.0.0.1', 'big.test', signed, { 'x-forwarded-for': '2001:db8:3e5::1' })).status, 403, 'an IPv6 block rule among them');
  t.equal((await get('127.0.0.1', 'big.test', signed, { 'x-forwarded-for': '198.19.0.1' })).status, 200, 'the allow rule at priority 1000');
});

t.test('refusals are counted by endpoint, policy and reason', async (t) => {
  const metrics = await (await request(`http://127.0.0.1:${metricsPort}/metrics`)).body.text();
  t.match(metrics, /edge_policy_denials_total\{endpoint="v6block",policy="ip_rule",reason="blocked"\} 1\b/);
  t.match(metrics, /edge_policy_denials_total\{endpoint="deny",policy="ip_rule",reason="default_deny"\} 3\b/);
  t.match(metrics, /edge_policy_denials_total\{endpoint="challenge",policy="ip_rule",reason="challenge"\} 3\b/);
  t.match(metrics, /edge_policy_denials_total\{endpoint="big",policy="signed_url",reason="missing"\} 1\b/);
});
