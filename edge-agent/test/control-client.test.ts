// The control-stream client against a fake control plane (a real grpc-js server
// in this process) with a real agent and origin: Hello and its metadata, full
// and delta configuration pushes and their acks, refusals, purges, the purge
// catch-up gate, prefetch jobs, heartbeats, traffic reports, reconnects.
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { status } from '@grpc/grpc-js';
import pino from 'pino';
import { AckKind, PurgeType } from '../../shared/gen/edge/v1/control_pb.ts';
import { CONTROL_FLOW_CONTROL_WINDOW_BYTES } from '../../shared/src/proto/edge-control.ts';
import { ControlClient, parseControlPlaneUrl } from '../src/control/control-client.ts';
import { agentVersion } from '../src/control/node-identity.ts';
import { FakeControlPlane, deltaPush, fullPush, prefetchPush, purgePush, type FakeStream, type WelcomeFields } from './control-fake.ts';
import { startAgent, startOrigin, HOST, type Origin, type TestAgent } from './helpers.ts';

const TOKEN = 'agent-token-0123456789abcdef';
const NODE_ID = '6f1c2b1e-8d4a-4c1e-9a37-2f0d1c3b4a5e';

function endpoint(id: string, hostname: string, originPort: number, version: string) {
  return {
    id, hostname, default_origin_id: `${id}-o`,
    origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true, max_retries: 0, custom_headers: { 'X-Config': version } }],
  };
}

function config(originPort: number, ep1: string, withEp2 = true) {
  return { endpoints: [endpoint('ep1', HOST, originPort, ep1), ...(withEp2 ? [endpoint('ep2', 'other.test', originPort, 'ep2')] : [])] };
}

interface Setup {
  fake: FakeControlPlane;
  origin: Origin;
  edge: TestAgent;
  client: ControlClient;
  logs: string[];
}

async function setup(t: Test, opts: { dataDir?: string; token?: string; fake?: FakeControlPlane } = {}): Promise<Setup> {
  const fake = opts.fake ?? await FakeControlPlane.start(TOKEN);
  const origin = await startOrigin((req, res) => {
    if (req.url === '/fail') {
      res.writeHead(500);
      res.end('no');
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=600', 'content-type': 'text/plain' });
    res.end(`config=${req.headers['x-config'] ?? '-'} path=${req.url}`);
  });
  const edge = await startAgent(null, opts.dataDir ? { dataDir: opts.dataDir } : {});
  const logs: string[] = [];
  const logger = pino({ level: 'debug' }, new Writable({ write(chunk, _enc, cb) { logs.push(String(chunk)); cb(); } }));
  const client = new ControlClient({
    url: `grpc://127.0.0.1:${fake.port}`, token: opts.token ?? TOKEN, agent: edge.agent, nodeId: NODE_ID, hostname: 'edge-test-1', region: 'eu-test',
    agentVersion: agentVersion(), logger, backoff: { baseMs: 20, capMs: 200 }, welcomeTimeoutMs: 5000,
  });
  t.teardown(async () => {
    await client.close();
    await edge.close();
    await origin.close();
    await fake.stop();
  });
  return { fake, origin, edge, client, logs };
}

async function ackOf(fake: FakeControlPlane, stream: FakeStream, kind: number, version: number) {
  return fake.ack(stream, (a) => a.kind === kind && a.version === BigInt(version), `ack kind ${kind} version ${version}`);
}

t.test('CONTROL_PLANE_URL schemes', async (t) => {
  t.same(parseControlPlaneUrl('grpc://cp.internal:8081'), { address: 'cp.internal:8081', tls: false });
  t.same(parseControlPlaneUrl('http://10.0.0.1:9000/ignored'), { address: '10.0.0.1:9000', tls: false });
  t.same(parseControlPlaneUrl('grpcs://cp.example.com'), { address: 'cp.example.com:443', tls: true });
  t.same(parseControlPlaneUrl('https://cp.example.com:8443'), { address: 'cp.example.com:8443', tls: true });
  t.throws(() => parseControlPlaneUrl('ftp://x:1'));
});

t.test('the agent grants the control plane a 16 MiB flow-control window, per stream and for the connection: a push is not held to 64 KiB per round trip', async (t) => {
  // A bare HTTP/2 server in the control plane's place: what matters is what the agent's connection announces.
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  const announced = new Promise<{ stream: number; connection: number }>((resolve) => {
    server.on('session', (session) => {
      sessions.add(session);
      session.once('remoteSettings', async (settings) => {
        // The connection's window is raised by a WINDOW_UPDATE right after the settings.
        for (let i = 0; i < 500 && (session.state.remoteWindowSize ?? 0) < CONTROL_FLOW_CONTROL_WINDOW_BYTES; i++) await new Promise((r) => setTimeout(r, 10));
        resolve({ stream: settings.initialWindowSize ?? 0, connection: session.state.remoteWindowSize ?? 0 });
      });
    });
  });
  server.on('stream', () => {}); // never answered
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const edge = await startAgent(null);
  const client = new ControlClient({
    url: `grpc://127.0.0.1:${(server.address() as AddressInfo).port}`, token: TOKEN, agent: edge.agent, nodeId: NODE_ID, hostname: 'edge-test-1', region: 'eu-test',
    agentVersion: agentVersion(), logger: pino({ level: 'silent' }), backoff: { baseMs: 20, capMs: 200 }, welcomeTimeoutMs: 5000, closeTimeoutMs: 100,
  });
  t.teardown(async () => {
    await client.close();
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
    await edge.close();
  });
  client.start();
  const windows = await announced;
  t.equal(windows.stream, CONTROL_FLOW_CONTROL_WINDOW_BYTES, 'each stream: SETTINGS_INITIAL_WINDOW_SIZE');
  t.equal(windows.connection, CONTROL_FLOW_CONTROL_WINDOW_BYTES, 'the connection: raised from 64 KiB by WINDOW_UPDATE');
  t.equal(CONTROL_FLOW_CONTROL_WINDOW_BYTES, 16 * 1024 * 1024);
});

t.test('Hello carries the node, its versions and the token as Bearer metadata; the token is never logged', async (t) => {
  const { fake, client, logs } = await setup(t);
  client.start();
  const stream = await fake.waitForStream(1);
  const hello = await fake.hello(stream);
  t.equal(stream.metadata.get('authorization')[0], `Bearer ${TOKEN}`);
  t.match(String(stream.metadata.get('user-agent')[0]), /edge-agent\//);
  t.equal(hello.nodeId, NODE_ID);
  t.equal(hello.hostname, 'edge-test-1');
  t.equal(hello.region, 'eu-test');
  t.equal(hello.agentVersion, agentVersion());
  t.match(hello.agentVersion, /^\d+\.\d+\.\d+/);
  t.equal(hello.configVersion, 0n, 'no configuration yet');
  t.equal(hello.purgeSequence, 0n);
  t.equal(hello.cacheEmpty, true, 'nothing cached yet: no purge made so far can concern it');
  await fake.waitFor(() => client.connected, 'connected');
  t.ok(logs.some((l) => l.includes('connected to the control plane')));
  t.notOk(logs.some((l) => l.includes(TOKEN)), 'token not in the logs');
});

t.test('a full push, then deltas: acked once live, only changed endpoints recompiled, removals applied', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  const v1 = config(origin.port, 'v1');
  fake.onHello = (s) => fake.send(s, fullPush(1, v1));
  client.start();
  const stream = await fake.waitForStream(1);
  const ack1 = await ackOf(fake, stream, AckKind.CONFIG, 1);
  t.equal(ack1.ok, true);
  t.equal(ack1.nonce, 'full-1');
  t.equal(ack1.error, '');
  t.match((await edge.get('/x')).body, 'config=v1', 'the full push serves');
  t.equal(edge.agent.controlConfigVersion, 1);

  const ep2Before = edge.agent.routing.byId.get('ep2');
  const v2 = config(origin.port, 'v2');
  fake.send(stream, deltaPush(1, v1, 2, v2));
  const ack2 = await ackOf(fake, stream, AckKind.CONFIG, 2);
  t.equal(ack2.ok, true, ack2.error);
  t.equal(ack2.nonce, 'delta-2');
  t.match((await edge.get('/y')).body, 'config=v2', 'the delta serves');
  t.equal(edge.agent.routing.byId.get('ep2'), ep2Before, 'the unchanged endpoint was not recompiled');
  t.not(edge.agent.routing.byId.get('ep1'), undefined);

  const v3 = config(origin.port, 'v2', false);
  fake.send(stream, deltaPush(2, v2, 3, v3));
  t.equal((await ackOf(fake, stream, AckKind.CONFIG, 3)).ok, true);
  t.equal((await edge.get('/z', { host: 'other.test' })).status, 421, 'the removed endpoint is gone');
  t.equal(edge.agent.configVersion, 3);
});

t.test('a delta on another base, or one whose result does not match the digest or count, is nacked base_mismatch and the old configuration keeps serving', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  const v1 = config(origin.port, 'v1');
  fake.onHello = (s) => fake.send(s, fullPush(1, v1));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);

  const v2 = config(origin.port, 'v2');
  fake.send(stream, deltaPush(1, v1, 2, v2, { baseVersion: 7 }));
  const wrongBase = await ackOf(fake, stream, AckKind.CONFIG, 2);
  t.equal(wrongBase.ok, false);
  t.match(wrongBase.error, /^base_mismatch: /);

  fake.send(stream, deltaPush(1, v1, 3, v2, { digest: '00'.repeat(32) }));
  const wrongDigest = await ackOf(fake, stream, AckKind.CONFIG, 3);
  t.equal(wrongDigest.ok, false);
  t.match(wrongDigest.error, /^base_mismatch: digest/);

  fake.send(stream, deltaPush(1, v1, 4, v2, { resourceCount: 5 }));
  const wrongCount = await ackOf(fake, stream, AckKind.CONFIG, 4);
  t.match(wrongCount.error, /^base_mismatch: 2 resources/);

  t.equal(edge.agent.configVersion, 1);
  t.match((await edge.get('/x')).body, 'config=v1', 'version 1 still serves');

  // The control plane answers base_mismatch with a full push of the version.
  fake.send(stream, fullPush(4, v2));
  t.equal((await fake.ack(stream, (a) => a.version === 4n && a.ok, 'full ack')).ok, true);
  t.match((await edge.get('/x2')).body, 'config=v2');
});

t.test('a configuration the agent cannot apply is nacked with the reason and the previous one keeps serving', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  const v1 = config(origin.port, 'v1');
  fake.onHello = (s) => fake.send(s, fullPush(1, v1));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);

  // Schema: an endpoint without origins.
  const noOrigins = { endpoints: [{ id: 'ep1', hostname: HOST, default_origin_id: 'x', origins: [] }] };
  fake.send(stream, fullPush(2, noOrigins));
  const schema = await ackOf(fake, stream, AckKind.CONFIG, 2);
  t.equal(schema.ok, false);
  t.match(schema.error, /^configuration refused: endpoint\/ep1: origins/);

  // Compilation: a default origin that is not one of the endpoint's.
  const v3 = config(origin.port, 'v3');
  (v3.endpoints[0] as { default_origin_id: string }).default_origin_id = 'missing';
  fake.send(stream, deltaPush(1, v1, 3, v3));
  const compile = await ackOf(fake, stream, AckKind.CONFIG, 3);
  t.equal(compile.ok, false);
  t.match(compile.error, /^configuration refused: endpoint ep1: default_origin_id missing/);

  // Two endpoints claiming one hostname.
  const v4 = config(origin.port, 'v4');
  v4.endpoints[1].hostname = HOST;
  fake.send(stream, deltaPush(1, v1, 4, v4));
  t.match((await ackOf(fake, stream, AckKind.CONFIG, 4)).error, /hostname cdn\.test is claimed/);

  t.equal(edge.agent.configVersion, 1);
  t.match((await edge.get('/x')).body, 'config=v1', 'version 1 still serves');
  // The delta base is still version 1.
  const v5 = config(origin.port, 'v5');
  fake.send(stream, deltaPush(1, v1, 5, v5));
  t.equal((await ackOf(fake, stream, AckKind.CONFIG, 5)).ok, true);
  t.match((await edge.get('/y')).body, 'config=v5');
});

t.test('purges apply in order and are acked; a replay is acked without effect; an unknown type is nacked', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  fake.onHello = (s) => fake.send(s, fullPush(1, config(origin.port, 'v1')));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);
  await edge.get('/a');
  await edge.get('/b');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT');

  fake.send(stream, purgePush(1, PurgeType.PATH, { paths: ['/a'] }));
  fake.send(stream, purgePush(2, PurgeType.PATH, { paths: ['/b'], endpointId: 'ep1' }));
  const a1 = await ackOf(fake, stream, AckKind.PURGE, 1);
  const a2 = await ackOf(fake, stream, AckKind.PURGE, 2);
  t.same([a1.ok, a1.id, a1.nonce], [true, 'purge-1', 'pn-1']);
  t.same([a2.ok, a2.id, a2.nonce], [true, 'purge-2', 'pn-2']);
  const acks = stream.received.flatMap((r) => (r.message.case === 'ack' && r.message.value.kind === AckKind.PURGE ? [r.message.value.version] : []));
  t.same(acks, [1n, 2n], 'acked in order');
  t.equal(edge.agent.appliedPurgeSequence, 2);
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'MISS');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT');

  fake.send(stream, purgePush(1, PurgeType.ALL));
  t.equal((await fake.ack(stream, (a) => a.kind === AckKind.PURGE && a.version === 1n && a.nonce === 'pn-1' && stream.received.filter((r) => r.message.case === 'ack' && r.message.value.version === 1n && r.message.value.kind === AckKind.PURGE).length === 2, 'replay ack')).ok, true);
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT', 'a replayed purge changes nothing');

  fake.send(stream, purgePush(3, PurgeType.UNSPECIFIED));
  const bad = await ackOf(fake, stream, AckKind.PURGE, 3);
  t.equal(bad.ok, false);
  t.match(bad.error, /unknown purge type/);
  t.equal(edge.agent.appliedPurgeSequence, 3, 'counted as seen, so it does not hold a catch-up');
});

/** A client on its first stream, configuration 1 applied, /a and /b fetched into its cache. */
async function connectedWithCache(t: Test) {
  const ctx = await setup(t);
  ctx.fake.onHello = (s) => ctx.fake.send(s, fullPush(1, config(ctx.origin.port, 'v1')));
  ctx.client.start();
  const first = await ctx.fake.waitForStream(1);
  await ackOf(ctx.fake, first, AckKind.CONFIG, 1);
  await ctx.edge.get('/a');
  await ctx.edge.get('/b');
  return { ...ctx, first };
}

/** The client's stream drops ('replica going away'); its next Hello is answered with `welcome` alone. The new stream. */
async function reconnectWith(fake: FakeControlPlane, welcome: WelcomeFields): Promise<FakeStream> {
  const count = fake.streams.length;
  fake.onHello = null;
  fake.welcome = welcome;
  fake.streams[count - 1]!.call.emit('error', { code: status.UNAVAILABLE, details: 'replica going away' });
  return fake.waitForStream(count + 1);
}

t.test('catch-up: after a Welcome ahead of the applied purge sequence nothing is served from the cache until the missed purges are applied', async (t) => {
  const { fake, origin, edge, client } = await connectedWithCache(t);
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'HIT');

  // The stream drops; meanwhile purge 1 (/a) is issued. The next Welcome says 1, the purge is held back by the test.
  const second = await reconnectWith(fake, { heartbeatIntervalMs: 60_000, trafficReportIntervalMs: 60_000, purgeSequence: 1, configVersion: 1 });
  const again = await fake.hello(second);
  t.equal(again.configVersion, 1n, 'resumes from the version held');
  t.equal(again.cacheEmpty, false, 'it holds cached objects: every purge it missed must come');
  await fake.waitFor(() => client.connected && edge.agent.catchingUp, 'catching up');

  const before = origin.count('/a');
  const a = await edge.get('/a');
  t.equal(a.headers['x-cache-status'], 'MISS', 'a cached object is not served while purges are missing');
  t.equal(origin.count('/a'), before + 1, 'it came from the origin');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS', 'nor any other');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS', 'not even what was stored during the catch-up');

  fake.send(second, purgePush(1, PurgeType.PATH, { paths: ['/a'] }));
  t.equal((await ackOf(fake, second, AckKind.PURGE, 1)).ok, true);
  t.equal(edge.agent.catchingUp, false, 'caught up');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'MISS', 'the purged path is a miss');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT');
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'HIT', 'the rest is served from the cache again');
});

t.test('an agent whose cache was empty at Hello takes the Welcome\'s purge sequence as applied: it serves from its cache at once, open purges sent after are replays', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  fake.welcome = { heartbeatIntervalMs: 60_000, trafficReportIntervalMs: 60_000, purgeSequence: 7, configVersion: 1 };
  fake.onHello = (s) => fake.send(s, fullPush(1, config(origin.port, 'v1')));
  client.start();
  const stream = await fake.waitForStream(1);
  t.equal((await fake.hello(stream)).cacheEmpty, true);
  await ackOf(fake, stream, AckKind.CONFIG, 1);
  t.equal(edge.agent.appliedPurgeSequence, 7, 'the platform\'s latest purge is taken as applied');
  t.equal(edge.agent.catchingUp, false, 'no catch-up: it had nothing to purge');
  await edge.get('/a');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT', 'served from the cache at once');
  // A purge still open when the stream opened follows (so it can count this node): a replay, acked, no effect.
  fake.send(stream, purgePush(5, PurgeType.PATH, { paths: ['/a'] }));
  t.equal((await ackOf(fake, stream, AckKind.PURGE, 5)).ok, true);
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT', 'what was fetched after the Welcome is newer than that purge');
  fake.send(stream, purgePush(8, PurgeType.PATH, { paths: ['/a'] }));
  t.equal((await ackOf(fake, stream, AckKind.PURGE, 8)).ok, true);
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'MISS', 'a later purge applies');
});

t.test('an agent told it missed too many purges to replay drops its whole cache, takes the Welcome\'s purge sequence as applied and serves again at once', async (t) => {
  const { fake, origin, edge, client, first } = await connectedWithCache(t);
  t.equal((await fake.hello(first)).acceptsCacheReset, true, 'its Hello says it obeys a reset');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT');

  // Away for long: the platform is 50,000 purges further on; the control plane says to drop the cache instead.
  const second = await reconnectWith(fake, { heartbeatIntervalMs: 60_000, trafficReportIntervalMs: 60_000, purgeSequence: 50_000, configVersion: 1, resetCache: true });
  t.equal((await fake.hello(second)).cacheEmpty, false, 'it held cached objects');
  await fake.waitFor(() => client.connected && edge.agent.appliedPurgeSequence === 50_000, 'the Welcome\'s purge sequence taken as applied');
  t.equal(edge.agent.catchingUp, false, 'no catch-up: everything the purges could concern is gone');
  const before = origin.count('/a');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'MISS', 'what it cached before is dropped');
  t.equal(origin.count('/a'), before + 1);
  t.equal((await edge.get('/b')).headers['x-cache-status'], 'MISS');
  t.equal((await edge.get('/a')).headers['x-cache-status'], 'HIT', 'and it caches again');
});

t.test('a prefetch job runs and is acked with its counts and failed URLs', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  fake.onHello = (s) => fake.send(s, fullPush(1, config(origin.port, 'v1')));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);
  fake.send(stream, prefetchPush('job-1', 'ep1', ['/p1', `http://${HOST}/p2`, '/fail']));
  fake.send(stream, prefetchPush('job-2', 'nope', ['/p3']));
  const ack = await fake.ack(stream, (a) => a.kind === AckKind.PREFETCH && a.id === 'job-1', 'prefetch ack');
  t.equal(ack.ok, true);
  t.equal(ack.nonce, 'jn-job-1');
  t.equal(ack.fetched, 2);
  t.equal(ack.failed, 1);
  t.equal(ack.failedUrls.length, 1);
  t.equal(ack.failedUrls[0].url, '/fail');
  t.match(ack.failedUrls[0].reason, /status 5\d\d/);
  t.equal((await edge.get('/p1')).headers['x-cache-status'], 'HIT', 'prefetched');
  const unknown = await fake.ack(stream, (a) => a.kind === AckKind.PREFETCH && a.id === 'job-2', 'prefetch ack 2');
  t.same([unknown.fetched, unknown.failed, unknown.failedUrls[0]?.reason], [0, 1, 'unknown endpoint']);
});

t.test('heartbeats and traffic reports on the Welcome intervals', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  fake.welcome = { heartbeatIntervalMs: 100, trafficReportIntervalMs: 100 };
  fake.onHello = (s) => fake.send(s, fullPush(1, config(origin.port, 'v1')));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);
  await edge.get('/a');
  await edge.get('/a');
  const hb = await fake.waitFor(() => fake.heartbeats(stream).find((h) => h.configVersion === 1n && h.cacheObjects === 1n), 'heartbeat');
  t.equal(hb.status, 'ok');
  t.equal(hb.purgeSequence, 0n);
  t.ok(hb.cacheBytes > 0n);
  t.same(hb.origins, [], 'no health probes in this agent');
  const report = await fake.waitFor(() => fake.trafficReports(stream).find((r) => r.rollups.some((x) => x.endpointId === 'ep1')), 'traffic report');
  const rollup = report.rollups.find((x) => x.endpointId === 'ep1')!;
  t.equal(rollup.requests, 2n);
  t.equal(rollup.status2xx, 2n);
  t.same(rollup.cacheStatuses, { MISS: 1n, HIT: 1n });
  t.equal(rollup.topUrls[0].url, '/a');
  t.equal(rollup.responseTimeBuckets.reduce((a, b) => a + b, 0n), 2n);
  t.ok(rollup.minuteStartMs > 0n);
  client.drain();
  const draining = await fake.waitFor(() => fake.heartbeats(stream).find((h) => h.status === 'draining'), 'draining heartbeat');
  t.equal(draining.configVersion, 1n);
});

t.test('reconnects after the control plane restarts, resuming from the version and purge sequence held', async (t) => {
  const first = await FakeControlPlane.start(TOKEN);
  const { origin, edge, client, logs } = await setup(t, { fake: first });
  first.onHello = (s) => {
    first.send(s, fullPush(3, config(origin.port, 'v3')));
    first.send(s, purgePush(4, PurgeType.ALL));
  };
  const disconnects: { code: number; retryInMs: number | null }[] = [];
  client.on('disconnected', (d) => disconnects.push(d));
  client.start();
  const stream = await first.waitForStream(1);
  await ackOf(first, stream, AckKind.PURGE, 4);
  const port = first.port;
  await first.stop();
  await first.waitFor(() => disconnects.length > 0 && !client.connected, 'disconnect');
  t.ok(disconnects[0].retryInMs !== null && disconnects[0].retryInMs >= 0 && disconnects[0].retryInMs <= 200, 'retry within the backoff cap');
  t.match((await edge.get('/x')).body, 'config=v3', 'keeps serving while the control plane is away');

  const second = await FakeControlPlane.start(TOKEN, port);
  t.teardown(() => second.stop());
  const again = await second.waitForStream(1);
  const hello = await second.hello(again);
  t.equal(hello.configVersion, 3n);
  t.equal(hello.purgeSequence, 4n);
  t.equal(hello.nodeId, NODE_ID);
  await second.waitFor(() => client.connected, 'reconnected');
  t.ok(logs.some((l) => /disconnected from the control plane.*retry_in_ms|retry_in_ms.*disconnected from the control plane/.test(l)), 'the disconnect is logged with its retry delay');
});

t.test('a refused token is retried at the backoff cap, with an error log and without the token', async (t) => {
  const { fake, client, logs } = await setup(t, { token: 'wrong-token-0123456789abcdef' });
  const disconnects: { code: number; retryInMs: number | null }[] = [];
  client.on('disconnected', (d) => disconnects.push(d));
  client.start();
  await fake.waitFor(() => disconnects.length >= 2 && fake.streams.length >= 2, 'two refused attempts');
  t.equal(disconnects[0].code, status.UNAUTHENTICATED);
  t.equal(disconnects[0].retryInMs, 200, 'at the cap');
  t.equal(disconnects[1].retryInMs, 200);
  t.ok(logs.some((l) => l.includes('"level":50') && l.includes('refused the agent token')));
  t.notOk(logs.some((l) => l.includes('wrong-token')), 'token not in the logs');
});

t.test('a refused token is logged once and shown on /healthz (503, unauthorized) until a stream is welcomed again', async (t) => {
  const { fake, client, edge, logs } = await setup(t);
  const metrics = await edge.agent.listenMetrics(0, '127.0.0.1');
  const health = async () => {
    const res = await fetch(`http://127.0.0.1:${metrics.port}/healthz`);
    return { code: res.status, body: await res.json() as { status: string; control_plane_token_refused: { code: string; reason: string; since: string } | null } };
  };
  const errors = () => logs.filter((l) => l.includes('"level":50') && l.includes('refused the agent token'));
  client.start();
  await fake.waitFor(() => client.connected, 'connected');
  t.match(await health(), { code: 200, body: { status: 'ok', control_plane_token_refused: null } });

  // The token stops being accepted (as a revocation does): the live stream ends with UNAUTHENTICATED, then every attempt is refused.
  fake.token = 'another-token-0123456789abcdef';
  fake.streams.at(-1)!.call.emit('error', { code: status.UNAUTHENTICATED, details: 'agent token revoked' });
  await fake.waitFor(() => fake.streams.length >= 4, 'three refused attempts after the revocation');
  const refused = await health();
  t.equal(refused.code, 503, 'not healthy: it gets no configuration or purges, and a revoked node leaves service');
  t.match(refused.body, { status: 'unauthorized', control_plane_token_refused: { code: 'UNAUTHENTICATED', reason: 'invalid agent token', since: String } });
  t.equal(errors().length, 1, 'one error for the run of refusals, none per retry');
  t.match(errors()[0], 'agent token revoked', 'naming why');
  t.ok(logs.some((l) => l.includes('"level":20') && l.includes('still refused')), 'the retries log at debug');
  t.notOk(logs.some((l) => l.includes(TOKEN)), 'the token is never logged');

  fake.token = TOKEN;
  await fake.waitFor(() => client.connected, 'welcomed again');
  t.match(await health(), { code: 200, body: { status: 'ok', control_plane_token_refused: null } });
  t.ok(logs.some((l) => l.includes('accepts the agent token again')));
});

t.test('a delta after a restart of the agent applies on the persisted resources', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-control-test-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const fake = await FakeControlPlane.start(TOKEN);
  const origin = await startOrigin((req, res) => res.end(`config=${req.headers['x-config']}`));
  t.teardown(async () => { await origin.close(); await fake.stop(); });
  const v1 = config(origin.port, 'v1');
  {
    const edge = await startAgent(null, { dataDir });
    const client = new ControlClient({ url: `grpc://127.0.0.1:${fake.port}`, token: TOKEN, agent: edge.agent, nodeId: NODE_ID, hostname: 'h', region: 'r', agentVersion: 'test', logger: pino({ level: 'silent' }) });
    fake.onHello = (s) => fake.send(s, fullPush(1, v1));
    client.start();
    await ackOf(fake, await fake.waitForStream(1), AckKind.CONFIG, 1);
    await client.close();
    await edge.close(); // waits for the configuration to be on disk
  }
  const edge = await startAgent(null, { dataDir });
  t.teardown(() => edge.close());
  t.equal(edge.agent.restore(), 1);
  t.equal(edge.agent.controlConfigVersion, 1);
  const client = new ControlClient({ url: `grpc://127.0.0.1:${fake.port}`, token: TOKEN, agent: edge.agent, nodeId: NODE_ID, hostname: 'h', region: 'r', agentVersion: 'test', logger: pino({ level: 'silent' }) });
  t.teardown(() => client.close());
  const v2 = config(origin.port, 'v2');
  fake.onHello = (s, hello) => fake.send(s, deltaPush(Number(hello.configVersion), v1, 2, v2));
  client.start();
  const stream = await fake.waitForStream(2);
  t.equal((await fake.hello(stream)).configVersion, 1n);
  const ack = await ackOf(fake, stream, AckKind.CONFIG, 2);
  t.equal(ack.ok, true, ack.error);
  t.match((await edge.get('/x')).body, 'config=v2');
});

t.test('cut off: 3 heartbeat intervals without a stream, the client tells the agent (its cache then revalidates); the next Welcome ends it', async (t) => {
  const { fake, origin, edge, client } = await setup(t);
  fake.welcome = { heartbeatIntervalMs: 100, trafficReportIntervalMs: 60_000 };
  fake.onHello = (s) => fake.send(s, fullPush(1, config(origin.port, 'v1')));
  client.start();
  const stream = await fake.waitForStream(1);
  await ackOf(fake, stream, AckKind.CONFIG, 1);
  t.equal(edge.agent.controlPlaneCutOff, false);
  // From now on the control plane answers no Hello: no stream comes up again.
  const welcome = fake.welcome;
  fake.welcome = null;
  stream.call.emit('error', { code: status.UNAVAILABLE, details: 'replica going away' });
  await fake.waitFor(() => edge.agent.controlPlaneCutOff, 'cut off after 3 heartbeat intervals (300 ms) without a stream');
  t.equal(client.connected, false);
  fake.welcome = welcome;
  await fake.waitFor(() => client.connected && !edge.agent.controlPlaneCutOff, 'a Welcome ends it');
});
