// An agent process with WORKERS=2 run from a config file (issue 23 item 4):
// both workers serve the configuration (each its own cache, each within half
// of CACHE_MEMORY_BYTES), SIGHUP brings a changed file and a renewed default
// certificate to both, HTTPS answers on both and a TLS session resumes
// whichever worker takes the next connection (shared ticket keys).
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type TLSSocket } from 'node:tls';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { agentHealth, viewerGet } from '../../test/support/edge-deployment.ts';
import { eventually } from '../../test/support/eventually.ts';
import { startAgentProcess, startOrigin } from './helpers.ts';
import { tlsConnect } from './tls-client.ts';

const dir = mkdtempSync(join(tmpdir(), 'edge-workers-'));
const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
  res.end(`origin ${req.headers.host} ${req.url}`);
});
t.teardown(() => origin.close());
const endpoint = (id: string, hostname: string, extra: Record<string, unknown> = {}) => ({
  id, hostname, default_origin_id: `${id}-o`, ...extra,
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
});
const configFile = join(dir, 'snapshot.json');
/** Every viewer here (loopback) is challenged by an IP rule. */
const challenged = () => endpoint('c', 'c.cdn.test', { ip_rules: [{ id: 'all', action: 'challenge', cidr: '127.0.0.0/8' }] });
writeFileSync(configFile, JSON.stringify({ version: 1, endpoints: [endpoint('a', 'a.cdn.test'), challenged()] }));
const ca = await makeCa('Workers Test CA');
const writeCertificate = async () => {
  const leaf = await makeLeaf(ca, ['*.cdn.test']);
  writeFileSync(join(dir, 'cdn.pem'), leaf.certPem + ca.pem);
  writeFileSync(join(dir, 'cdn.key'), leaf.keyPem, { mode: 0o600 });
};
await writeCertificate();
const agent = await startAgentProcess({
  CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), WORKERS: '2', CACHE_MEMORY_BYTES: '32MiB', CACHE_DISK_BYTES: '0', // memory tiers only: each worker's own cache is what is tested
  TLS_CERT_FILE: join(dir, 'cdn.pem'), TLS_KEY_FILE: join(dir, 'cdn.key'),
});
t.teardown(() => { agent.child.kill('SIGKILL'); });
const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"msg":"edge agent listening"'))!)![1]);
const get = (host: string, path: string) => viewerGet(agent.port, host, path, { connection: 'close' });

t.test('both workers serve the configuration, each with a cache of its own', async (t) => {
  t.equal(agent.logs.filter((l) => l.includes('"msg":"worker listening"')).length, 2);
  await eventually(async () => {
    t.equal((await get('a.cdn.test', '/x')).status, 200);
    return (await agentHealth(agent)).cache_objects === 2;
  }, 'each worker cached /x once');
});

t.test('regression: an IP-rule challenge passed at one worker passes at every worker (each drew its own cookie secret)', async (t) => {
  const first = await get('c.cdn.test', '/page');
  t.equal(first.status, 403);
  const setCookie = String(first.headers['set-cookie']);
  const cookie = setCookie.slice(0, setCookie.indexOf(';'));
  t.match(cookie, /^__edge_challenge=/);
  // Each on a new connection: the two workers share the listening port and take connections in turn.
  const back = await Promise.all(Array.from({ length: 20 }, () => viewerGet(agent.port, 'c.cdn.test', '/page', { connection: 'close', cookie })));
  t.same(back.map((r) => r.status), new Array(20).fill(200), 'every connection passes, whichever worker took it');
});

t.test('SIGHUP brings a changed config file and a renewed default certificate to every worker', async (t) => {
  const before = await tlsConnect({ port: httpsPort, servername: 'a.cdn.test', ca: ca.pem });
  before.close();
  writeFileSync(configFile, JSON.stringify({ version: 2, endpoints: [endpoint('a', 'a.cdn.test'), endpoint('b', 'b.cdn.test'), challenged()] }));
  await writeCertificate();
  agent.child.kill('SIGHUP');
  await eventually(async () => (await agentHealth(agent)).config_version === 2, 'the new file is in force');
  const answers = await Promise.all(Array.from({ length: 20 }, () => get('b.cdn.test', '/new')));
  t.same(new Set(answers.map((r) => r.status)), new Set([200]), 'the new endpoint, on every connection');
  await eventually(async () => {
    const all = await Promise.all(Array.from({ length: 10 }, () => tlsConnect({ port: httpsPort, servername: 'b.cdn.test', ca: ca.pem })));
    for (const c of all) c.close();
    return all.every((c) => c.fingerprint !== before.fingerprint);
  }, 'every worker serves the renewed certificate');
});

t.test('a TLS session resumes whichever worker takes the next connection', async (t) => {
  let session: Buffer | undefined;
  const reused: boolean[] = [];
  for (let i = 0; i < 12; i++) {
    const s = await new Promise<TLSSocket>((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.cdn.test', ca: ca.pem, session, maxVersion: 'TLSv1.2' }, () => resolve(socket));
      socket.once('error', reject);
    });
    if (session !== undefined) reused.push(s.isSessionReused());
    session = s.getSession() ?? session;
    s.destroy();
  }
  t.same(reused, Array(11).fill(true), 'every reconnection resumed the session');
});
