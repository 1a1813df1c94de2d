// Edge access control configured through the control plane (issue 22, item 1):
// a control-plane process on PostgreSQL and Redis, an edge-agent process
// connected to it over the control channel (listening on both address
// families, trusting 127.0.0.1 as a proxy that reports viewers in
// X-Forwarded-For) and a real origin. Every policy is set through the CDN API
// and published; the test then sends viewers' requests to the agent: signed
// URLs (the sign-url command, a wrong signature, an expired URL, a rotated
// key inside and outside its grace period, a rotation without grace ending
// every earlier secret, IP binding from another address),
// an IPv6 block rule, a default-deny endpoint, a blocked country, an
// http→https redirect and a path redirect with a capture.
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { createTestDatabase } from '../support/database.ts';
import { eventually } from '../support/eventually.ts';
import { repoRoot, startControlPlaneProcess } from '../support/processes.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!(services.postgresUrl && services.redisUrl)) {
  t.pass('skipped: needs PostgreSQL and Redis');
} else {
  const { postgresUrl, redisUrl } = services;
  await t.test('edge access control through the control plane', { timeout: 240_000 }, (tt) => run(tt, postgresUrl, redisUrl));
}

interface Reply { status: number; headers: http.IncomingHttpHeaders; body: string }

async function run(t: Test, postgresUrl: string, redisUrl: string) {
  const database = await createTestDatabase({ postgresUrl });
  await database.db.close();
  t.teardown(() => database.dispose());
  const dir = mkdtempSync(join(tmpdir(), 'sp-edge-access-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));

  const origin = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
    res.end(`origin ${req.url}`);
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { origin.closeAllConnections(); origin.close(() => resolve()); }));
  const originPort = (origin.address() as { port: number }).port;

  const cp = await startControlPlaneProcess(t, {
    DATABASE_URL: database.url, REDIS_URL: redisUrl, SECRETS_KEY: randomBytes(32).toString('hex'), NODE_ENV: 'development', LOG_LEVEL: 'info',
    PUBLIC_URL: '', GRPC_PORT: '0', CDN_PUBLISH_MODE: 'manual', EDGE_HEARTBEAT_INTERVAL_MS: '500', DATA_DIR: join(dir, 'cp'),
  });
  const grpcPort = Number((await cp.waitForLine(/"port":(\d+).*edge control channel listening/))[1]);
  const email = (await cp.waitForLine(/^\s+e-mail:\s+(\S+)/))[1]!;
  const password = (await cp.waitForLine(/^\s+password:\s+(\S+)/))[1]!;
  const login = await fetch(`${cp.url}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  const accessToken = ((await login.json()) as { data: { access_token: string } }).data.access_token;
  const api = async (method: string, path: string, json?: unknown) => {
    const res = await fetch(`${cp.url}${path}`, {
      method, headers: { authorization: `Bearer ${accessToken}`, ...(json === undefined ? {} : { 'content-type': 'application/json' }) },
      body: json === undefined ? undefined : JSON.stringify(json),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };

  /** An endpoint with an origin of its own (each origin belongs to one endpoint). */
  const makeEndpoint = async (name: string, settings: Record<string, unknown> = {}) => {
    const o = await api('POST', '/v1/cdn/origins', { name: `${name} origin`, scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true });
    return api('POST', '/v1/cdn/endpoints', { name, default_origin_id: o.id, ...settings }) as Promise<{ id: string; hostname: string }>;
  };

  const agentToken = (await api('POST', '/v1/cdn/agent-tokens', { name: 'edge access agent' })).token as string;
  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${grpcPort}`, AGENT_TOKEN: agentToken, DATA_DIR: join(dir, 'agent'), HOST: '::', SHUTDOWN_TIMEOUT_MS: '1000',
    TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32',
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });

  const publish = async (what: string) => {
    const version = await api('POST', '/v1/cdn/config/publish', { description: what });
    await eventually(async () => (await api('GET', `/v1/cdn/config/versions/${version.id}`)).propagation_status.synced_nodes === 1, `${what}: the agent acked`);
  };

  /** A viewer's request through the agent: from 127.0.0.1 or ::1, optionally reported as another address by the trusted proxy. */
  const viewer = (host: string, path: string, options: { from?: '127.0.0.1' | '::1'; as?: string } = {}): Promise<Reply> => new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host, ...(options.as ? { 'x-forwarded-for': options.as } : {}) };
    const req = http.request({ host: options.from ?? '127.0.0.1', port: agent.port, path, headers, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('timeout', () => req.destroy(new Error('viewer request timed out'))).on('error', reject).end();
  });

  // Signed URLs: a key, then token authentication on.
  const signed = await makeEndpoint('signed');
  const key = await api('POST', `/v1/cdn/endpoints/${signed.id}/signing-keys`, { name: 'player' });
  await api('PATCH', `/v1/cdn/endpoints/${signed.id}`, { token_auth_enabled: true });
  const first = key.secret as string;
  // An IPv6 block rule; a default-deny endpoint admitting only 127.0.0.1; a blocked country.
  const v6 = await makeEndpoint('no v6 loopback');
  await api('POST', `/v1/cdn/endpoints/${v6.id}/ip-rules`, { action: 'block', cidr: '::1', priority: 10 });
  const deny = await makeEndpoint('default deny');
  await api('POST', `/v1/cdn/endpoints/${deny.id}/ip-rules`, { action: 'allow', cidr: '127.0.0.1/32' });
  await api('PATCH', `/v1/cdn/endpoints/${deny.id}`, { ip_default_action: 'deny' });
  const geo = await makeEndpoint('no CN', { geo_restriction: { enabled: true, policy: 'blocklist', countries: ['CN'] } });
  // Redirects: the endpoint's http→https, and a route's path redirect with a capture.
  const tls = await makeEndpoint('https only', { tls_config: { http_to_https_redirect: true } });
  const moved = await makeEndpoint('moved');
  const movedOrigin = (await api('GET', `/v1/cdn/endpoints/${moved.id}`)).default_origin_id;
  await api('POST', `/v1/cdn/distributions/${moved.id}/routes`, {
    name: 'legacy', origin_id: movedOrigin, match: { paths: ['/old/*'] },
    redirect_rules: [{ type: 'path', status_code: 301, match_path: '/old/*', redirect_to: '/new/$1' }],
  });
  await publish('access policies');

  const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

  await t.test('signed URLs: the sign-url command\'s output is served; unsigned, wrongly signed and expired URLs get the same 403', async (t) => {
    writeFileSync(join(dir, 'player.secret'), first, { mode: 0o600 });
    const run = spawnSync(process.execPath, ['edge-agent/src/policy/sign-url-cli.ts', '--url', `http://${signed.hostname}/videos/a.mp4`, '--secret-file', join(dir, 'player.secret')], { cwd: repoRoot, encoding: 'utf8', timeout: 10_000 });
    t.equal(run.status, 0, run.stderr);
    const url = new URL(run.stdout.trim());
    const ok = await viewer(signed.hostname, url.pathname + url.search);
    t.equal(ok.status, 200);
    t.equal(ok.body, 'origin /videos/a.mp4', 'the origin never sees the signature');
    const refused = [
      await viewer(signed.hostname, '/videos/a.mp4'),
      await viewer(signed.hostname, url.pathname + url.search.replace(/token=.{4}/, 'token=AAAA')),
      await viewer(signed.hostname, signPath({ path: '/videos/a.mp4', expires: Math.floor(Date.now() / 1000) - 60, secret: first })),
    ];
    t.same(refused.map((r) => [r.status, r.body]), [[403, 'Forbidden\n'], [403, 'Forbidden\n'], [403, 'Forbidden\n']]);
  });

  await t.test('rotation: the replaced secret works during its grace period; a rotation without grace ends every earlier secret, one still inside an earlier grace too', async (t) => {
    const rotated = await api('POST', `/v1/cdn/endpoints/${signed.id}/signing-keys/${key.id}/rotate`, { grace_period_hours: 1 });
    const second = rotated.secret as string;
    await publish('rotation with an hour of grace');
    t.equal((await viewer(signed.hostname, signPath({ path: '/videos/b.mp4', expires: inAnHour(), secret: first }))).status, 200, 'the first secret, inside its grace');
    t.equal((await viewer(signed.hostname, signPath({ path: '/videos/b.mp4', expires: inAnHour(), secret: second }))).status, 200, 'the new secret');
    const third = (await api('POST', `/v1/cdn/endpoints/${signed.id}/signing-keys/${key.id}/rotate`, { grace_period_hours: 0 })).secret as string;
    await publish('rotation without grace');
    t.equal((await viewer(signed.hostname, signPath({ path: '/videos/b.mp4', expires: inAnHour(), secret: second }))).status, 403, 'the second secret: its grace was 0');
    t.equal((await viewer(signed.hostname, signPath({ path: '/videos/b.mp4', expires: inAnHour(), secret: first }))).status, 403, 'the first too, though its own hour had not ended');
    t.equal((await viewer(signed.hostname, signPath({ path: '/videos/b.mp4', expires: inAnHour(), secret: third }))).status, 200);
  });

  await t.test('IP binding: a URL signed for one address is refused from another', async (t) => {
    const bound = await api('POST', `/v1/cdn/endpoints/${signed.id}/signing-keys`, { name: 'bound', algorithm: 'HMAC-SHA512', ip_binding_enabled: true, token_param: 'sig', expires_param: 'exp' });
    await publish('an IP-bound key');
    const url = signPath({ path: '/videos/c.mp4', expires: inAnHour(), secret: bound.secret, algorithm: 'HMAC-SHA512', tokenParam: 'sig', expiresParam: 'exp', clientIp: '203.0.113.7' });
    t.equal((await viewer(signed.hostname, url, { as: '203.0.113.7' })).status, 200);
    t.equal((await viewer(signed.hostname, url, { as: '198.51.100.1' })).status, 403);
  });

  await t.test('an IPv6 block rule refuses ::1 and serves 127.0.0.1', async (t) => {
    t.equal((await viewer(v6.hostname, '/x', { from: '::1' })).status, 403);
    t.equal((await viewer(v6.hostname, '/x', { from: '127.0.0.1' })).status, 200);
  });

  await t.test('a default-deny endpoint serves only what its allow rule holds', async (t) => {
    t.equal((await viewer(deny.hostname, '/x')).status, 200);
    t.equal((await viewer(deny.hostname, '/x', { from: '::1' })).status, 403);
    t.equal((await viewer(deny.hostname, '/x', { as: '192.0.2.10' })).status, 403);
  });

  await t.test('a blocked country is refused; another country and an address with none are served', async (t) => {
    t.equal((await viewer(geo.hostname, '/x', { as: '1.0.1.7' })).status, 403, 'CN in the packaged database');
    t.equal((await viewer(geo.hostname, '/x', { as: '8.8.8.8' })).status, 200);
    t.equal((await viewer(geo.hostname, '/x')).status, 200, 'loopback');
  });

  await t.test('redirects answered by the edge: http→https and a path redirect with a capture', async (t) => {
    const toHttps = await viewer(tls.hostname, '/watch?v=1');
    t.equal(toHttps.status, 301);
    const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);
    t.equal(toHttps.headers.location, `https://${tls.hostname}:${httpsPort}/watch?v=1`, "to the agent's HTTPS listener");
    const path = await viewer(moved.hostname, '/old/shows/42?t=10');
    t.equal(path.status, 301);
    t.equal(path.headers.location, '/new/shows/42?t=10');
    t.equal((await viewer(moved.hostname, '/new/shows/42')).body, 'origin /new/shows/42');
  });

  await t.test('the refusals are counted by reason on the agent', async (t) => {
    const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    for (const [endpoint, policy, reason] of [
      [signed.id, 'signed_url', 'missing'], [signed.id, 'signed_url', 'bad_signature'], [signed.id, 'signed_url', 'expired'],
      [signed.id, 'signed_url', 'ip_mismatch'], [v6.id, 'ip_rule', 'blocked'], [deny.id, 'ip_rule', 'default_deny'], [geo.id, 'geo', 'country_blocked'],
    ]) {
      t.match(metrics, new RegExp(`edge_policy_denials_total\\{endpoint="${endpoint}",policy="${policy}",reason="${reason}"\\} [1-9]`), `${policy} ${reason}`);
    }
  });
}
