// The real agent process with CONTROL_PLANE_URL against a fake control plane:
// SIGTERM drains (a draining heartbeat at once, the request in flight finishes,
// the stream ends cleanly, exit 0), and a restart with the control plane down
// serves the persisted configuration, then resumes from it when it comes back.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { AckKind, PurgeType } from '../../shared/gen/edge/v1/control_pb.ts';
import { FakeControlPlane, deltaPush, fullPush, purgePush } from './control-fake.ts';
import { exitOf, startAgentProcess, startOrigin, HOST } from './helpers.ts';

const TOKEN = 'process-agent-token-0123456789';

async function get(port: number, path: string): Promise<{ status: number; body: string; cache: string | undefined }> {
  const res = await request(`http://127.0.0.1:${port}${path}`, { headers: { host: HOST } });
  return { status: res.statusCode, body: await res.body.text(), cache: res.headers['x-cache-status'] as string | undefined };
}

function snapshot(originPort: number, tag: string) {
  return {
    endpoints: [{
      id: 'ep1', hostname: HOST, default_origin_id: 'o1',
      origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true, max_retries: 0, custom_headers: { 'X-Config': tag } }],
    }],
  };
}

t.test('CONFIG_FILE with CONTROL_PLANE_URL is refused at start with one clear line', async (t) => {
  const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
  const r = spawnSync(process.execPath, [main], { env: { ...process.env, CONTROL_PLANE_URL: 'grpc://127.0.0.1:1', AGENT_TOKEN: TOKEN, CONFIG_FILE: '/nonexistent.json' }, encoding: 'utf8', timeout: 10_000 });
  t.equal(r.status, 1);
  t.match(r.stderr.trim(), /^edge-agent: CONFIG_FILE: cannot be used with CONTROL_PLANE_URL[^\n]*$/);
  t.notMatch(r.stderr, TOKEN);
});

t.test('SIGTERM: a draining heartbeat at once, the request in flight completes, the stream ends cleanly, exit 0', async (t) => {
  let release: () => void = () => {};
  const released = new Promise<void>((r) => { release = r; });
  const origin = await startOrigin((req, res) => {
    const answer = () => {
      res.writeHead(200, { 'cache-control': 'no-store' });
      res.end(`config=${req.headers['x-config']} ${req.url}`);
    };
    if (req.url === '/slow') void released.then(answer);
    else answer();
  });
  const fake = await FakeControlPlane.start(TOKEN);
  fake.onHello = (s) => fake.send(s, fullPush(1, snapshot(origin.port, 'v1')));
  const dir = mkdtempSync(join(tmpdir(), 'edge-control-proc-'));
  const dataDir = join(dir, 'data');
  const { child, port, logs } = await startAgentProcess({
    DATA_DIR: dataDir, CONTROL_PLANE_URL: `grpc://127.0.0.1:${fake.port}`, AGENT_TOKEN: TOKEN,
    NODE_HOSTNAME: 'edge-proc-1', REGION: 'eu-proc', SHUTDOWN_TIMEOUT_MS: '10000',
  });
  t.teardown(async () => {
    release();
    if (child.exitCode === null) child.kill('SIGKILL');
    await origin.close();
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const stream = await fake.waitForStream(1);
  const hello = await fake.hello(stream);
  t.equal(hello.hostname, 'edge-proc-1');
  t.equal(hello.region, 'eu-proc');
  t.equal(hello.nodeId, readFileSync(join(dataDir, 'node-id'), 'utf8').trim(), 'the node id kept in DATA_DIR');
  t.equal(stream.metadata.get('authorization')[0], `Bearer ${TOKEN}`);
  t.equal((await fake.ack(stream, (a) => a.kind === AckKind.CONFIG && a.version === 1n, 'config ack')).ok, true);
  t.equal((await get(port, '/x')).body, 'config=v1 /x');

  let answered = false;
  const inFlight = get(port, '/slow').then((r) => { answered = true; return r; });
  await origin.received('/slow');
  child.kill('SIGTERM');
  const draining = await fake.waitFor(() => fake.heartbeats(stream).find((h) => h.status === 'draining'), 'draining heartbeat');
  t.equal(draining.configVersion, 1n);
  t.equal(answered, false, 'the control plane hears of the drain while the request is still in flight');
  t.equal(stream.closed, false, 'the stream stays up while requests finish');
  release();
  const res = await inFlight;
  t.equal(res.status, 200);
  t.equal(res.body, 'config=v1 /slow', 'the in-flight request completed');
  t.equal(await exitOf(child), 0, 'exit code 0');
  t.equal(stream.clientEnded, true, 'the agent ended the stream itself (half-close), not a reset');
  t.ok(logs.some((l) => l.includes('connected to the control plane')));
  t.ok(logs.some((l) => l.includes('"msg":"configuration applied"') && l.includes('"version":1')));
  t.notOk(logs.some((l) => l.includes(TOKEN)), 'the token is not logged');
});

t.test('restart with the control plane down: the persisted configuration serves; when it returns, the agent resumes from it', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'cache-control': 'max-age=600' });
    res.end(`config=${req.headers['x-config']} ${req.url}`);
  });
  const dir = mkdtempSync(join(tmpdir(), 'edge-control-proc-'));
  const dataDir = join(dir, 'data');
  const v7 = snapshot(origin.port, 'v7');
  const fake = await FakeControlPlane.start(TOKEN);
  const cpPort = fake.port;
  fake.onHello = (s) => {
    fake.send(s, fullPush(7, v7));
    fake.send(s, purgePush(3, PurgeType.ALL));
  };
  // Memory tiers only: a kept node tier is held until a control plane says which purges were missed
  // (test/flows/edge-node-cache.test.ts); here the configuration kept in DATA_DIR is what is tested.
  const env = { DATA_DIR: dataDir, CONTROL_PLANE_URL: `grpc://127.0.0.1:${cpPort}`, AGENT_TOKEN: TOKEN, CACHE_DISK_BYTES: '0' };
  let second: FakeControlPlane | null = null;
  const children: import('node:child_process').ChildProcess[] = [];
  t.teardown(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    await origin.close();
    await fake.stop();
    await second?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const first = await startAgentProcess(env);
  children.push(first.child);
  const s1 = await fake.waitForStream(1);
  const nodeId = (await fake.hello(s1)).nodeId;
  await fake.ack(s1, (a) => a.kind === AckKind.PURGE && a.version === 3n, 'purge ack');
  t.equal((await get(first.port, '/a')).body, 'config=v7 /a');
  first.child.kill('SIGTERM');
  t.equal(await exitOf(first.child), 0);
  await fake.stop();

  // The control plane is down: the agent starts anyway and serves what it persisted.
  const again = await startAgentProcess(env);
  children.push(again.child);
  t.ok(again.logs.some((l) => l.includes('serving the configuration persisted in DATA_DIR') && l.includes('"version":7')));
  const res = await get(again.port, '/b');
  t.equal(res.status, 200);
  t.equal(res.body, 'config=v7 /b', 'the persisted configuration serves with the control plane down');
  await fake.waitFor(() => again.logs.some((l) => l.includes('cannot connect to the control plane') && l.includes('retry_in_ms')), 'retry log');
  t.equal((await get(again.port, '/b')).cache, 'HIT', 'and its cache serves');

  // It comes back on the same address: Hello carries the persisted version and purge sequence; a delta on it applies.
  second = await FakeControlPlane.start(TOKEN, cpPort);
  const srv = second;
  srv.onHello = (s, hello) => srv.send(s, deltaPush(Number(hello.configVersion), v7, 8, snapshot(origin.port, 'v8')));
  const s2 = await srv.waitForStream(1);
  const hello = await srv.hello(s2);
  t.equal(hello.configVersion, 7n, 'Hello reports the persisted version');
  t.equal(hello.purgeSequence, 3n, 'and the persisted purge sequence');
  t.equal(hello.nodeId, nodeId, 'the same node');
  const ack = await srv.ack(s2, (a) => a.kind === AckKind.CONFIG && a.version === 8n, 'delta ack');
  t.equal(ack.ok, true, ack.error);
  t.equal((await get(again.port, '/c')).body, 'config=v8 /c');
  again.child.kill('SIGTERM');
  t.equal(await exitOf(again.child), 0);
});
