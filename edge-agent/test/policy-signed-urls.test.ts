// Signed URLs on a real agent process started with --config-file, in front of
// a real origin: the output of `npm run sign-url` is accepted; a wrong
// signature, an expired URL, a malformed token, a secret past its rotation's
// grace and an IP-bound URL from another address are each refused with the same
// 403 while the access record and edge_policy_denials_total name the reason;
// a secret inside its grace passes; the signature parameters reach neither the
// cache key nor the origin.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { HOST, snapshotFor, startAgentProcess, startOrigin } from './helpers.ts';

const CURRENT = 'current-secret-of-k1-0123456789-abcdefghijkl';
const IN_GRACE = 'replaced-secret-in-grace-0123456789-abcdefgh';
const PAST_GRACE = 'replaced-secret-past-grace-0123456789-abcdef';
const BOUND = 'secret-of-the-ip-bound-key-0123456789-abcdefg';
const cli = fileURLToPath(new URL('../src/policy/sign-url-cli.ts', import.meta.url));

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=600' });
  res.end(`origin saw ${req.url}`);
});
const dir = mkdtempSync(join(tmpdir(), 'edge-signed-urls-'));
const hour = 3_600_000;
const snapshot = snapshotFor(origin.port, {
  endpoint: {
    signing_keys: [
      {
        id: 'k1', algorithm: 'HMAC-SHA256',
        secrets: [
          { secret: CURRENT, valid_until: null },
          { secret: IN_GRACE, valid_until: new Date(Date.now() + hour).toISOString() },
          { secret: PAST_GRACE, valid_until: new Date(Date.now() - 60_000).toISOString() },
        ],
      },
      { id: 'k2', algorithm: 'HMAC-SHA512', secrets: [{ secret: BOUND }], token_param: 'sig', expires_param: 'exp', ip_binding_enabled: true },
    ],
  },
});
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify(snapshot));
const agent = await startAgentProcess({
  CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), LOG_LEVEL: 'debug',
  // The test's requests all come from 127.0.0.1: a trusted "proxy" whose X-Forwarded-For names the viewer.
  TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32',
});
t.teardown(async () => {
  agent.child.kill('SIGKILL');
  await origin.close();
  rmSync(dir, { recursive: true, force: true });
});
const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);

async function get(pathAndQuery: string, viewer = '198.51.100.20') {
  const res = await request(`http://127.0.0.1:${agent.port}${pathAndQuery}`, { headers: { host: HOST, 'x-forwarded-for': viewer } });
  return { status: res.statusCode, body: await res.body.text(), cache: res.headers['x-cache-status'], headers: res.headers };
}

/** Resolves with the first log line matching (the access record is written just after the answer, so it may trail it). */
function logLine(match: (line: string) => boolean): Promise<string | undefined> {
  return new Promise((resolve) => {
    const check = () => {
      const line = agent.logs.find(match);
      if (line === undefined) return false;
      agent.child.stdout!.off('data', onData);
      clearTimeout(timer);
      resolve(line);
      return true;
    };
    const onData = () => setImmediate(check);
    const timer = setTimeout(() => { agent.child.stdout!.off('data', onData); resolve(undefined); }, 5000);
    agent.child.stdout!.on('data', onData);
    check();
  });
}

const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

t.test('the sign-url command\'s output is accepted; the signature parameters reach neither the origin nor the cache key', async (t) => {
  writeFileSync(join(dir, 'k1.secret'), `${CURRENT}\n`);
  const run = spawnSync(process.execPath, [cli, '--url', `http://${HOST}/videos/a.mp4?quality=hd`, '--secret-file', join(dir, 'k1.secret'), '--expires-in', '600'], { encoding: 'utf8', timeout: 10_000 });
  t.equal(run.status, 0, run.stderr);
  const signed = new URL(run.stdout.trim());
  t.equal(signed.host, HOST);
  t.notMatch(run.stdout + run.stderr, CURRENT, 'the secret is not printed');
  const first = await get(signed.pathname + signed.search);
  t.equal(first.status, 200);
  t.equal(first.body, 'origin saw /videos/a.mp4?quality=hd', 'the origin gets the other parameters, not token or expires');
  t.equal(first.cache, 'MISS');
  const other = await get(signPath({ path: '/videos/a.mp4?quality=hd', expires: inAnHour(), secret: CURRENT }));
  t.equal(other.status, 200);
  t.equal(other.cache, 'HIT', 'another valid signature of the same URL is the same cached object');
  t.equal(origin.count('/videos/a.mp4?quality=hd'), 1);
  t.equal(origin.requests.filter((r) => /token|expires/.test(r.url)).length, 0);
});

t.test('refusals: one identical 403, a distinct reason in the access record and the metrics', async (t) => {
  const path = '/videos/b.mp4';
  const good = signPath({ path, expires: inAnHour(), secret: CURRENT });
  const token = /token=([^&]+)/.exec(good)![1]!;
  const cases: [string, string, string][] = [
    ['unsigned', path, 'missing'],
    ['wrong signature', `${path}?expires=${inAnHour()}&token=${token.slice(0, -2)}xx`, 'bad_signature'],
    ['another path\'s signature', `/videos/c.mp4?${good.split('?')[1]}`, 'bad_signature'],
    ['expired', signPath({ path, expires: Math.floor(Date.now() / 1000) - 10, secret: CURRENT }), 'expired'],
    ['malformed', `${path}?expires=tomorrow&token=${token}`, 'malformed'],
    ['secret past its grace period', signPath({ path, expires: inAnHour(), secret: PAST_GRACE }), 'retired_secret'],
    ['IP-bound URL from another address', signPath({ path, expires: inAnHour(), secret: BOUND, algorithm: 'HMAC-SHA512', tokenParam: 'sig', expiresParam: 'exp', clientIp: '203.0.113.7' }), 'ip_mismatch'],
  ];
  const bodies = new Set<string>();
  for (const [what, url, reason] of cases) {
    const res = await get(url, '203.0.113.99');
    t.equal(res.status, 403, what);
    t.equal(res.headers['cache-control'], 'no-store', `${what}: not cacheable`);
    bodies.add(`${res.headers['content-type']} ${res.body}`);
    const logged = await logLine((l) => l.includes('"msg":"access"') && l.includes(JSON.stringify(url.split('?')[0])) && l.includes(`"denial_reason":"${reason}"`));
    t.ok(logged, `${what}: access record names ${reason}`);
    t.notMatch(logged ?? '', CURRENT);
  }
  t.equal(bodies.size, 1, 'the viewer cannot tell the reasons apart');
  t.equal(origin.count('/videos/b.mp4'), 0, 'nothing refused reached the origin');
  const metrics = await (await request(`http://127.0.0.1:${metricsPort}/metrics`)).body.text();
  for (const reason of ['missing', 'bad_signature', 'expired', 'malformed', 'retired_secret', 'ip_mismatch']) {
    t.match(metrics, new RegExp(`edge_policy_denials_total\\{endpoint="ep1",policy="signed_url",reason="${reason}"\\} [1-9]`), `metric for ${reason}`);
  }
});

t.test('a secret inside its rotation\'s grace period passes; the current one too', async (t) => {
  t.equal((await get(signPath({ path: '/videos/d.mp4', expires: inAnHour(), secret: IN_GRACE }))).status, 200);
  t.equal((await get(signPath({ path: '/videos/d.mp4', expires: inAnHour(), secret: CURRENT }))).status, 200);
});

t.test('IP binding: accepted from the address it was signed for (IPv4 and IPv6 viewers)', async (t) => {
  const sign = (ip: string) => signPath({ path: '/videos/e.mp4', expires: inAnHour(), secret: BOUND, algorithm: 'HMAC-SHA512', tokenParam: 'sig', expiresParam: 'exp', clientIp: ip });
  t.equal((await get(sign('203.0.113.7'), '203.0.113.7')).status, 200);
  t.equal((await get(sign('2001:db8::7'), '2001:db8::7')).status, 200);
  t.equal((await get(sign('2001:db8::7'), '2001:db8::8')).status, 403);
});
