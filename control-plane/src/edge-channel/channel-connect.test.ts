// The control channel's stream lifecycle through the real server (gRPC on a
// free port, PostgreSQL, Redis) with real grpc-js clients as agents: agent-token
// authentication, Hello validation and the node's registration, Welcome, a
// second stream of the same node, the node offline when its stream ends or
// its heartbeats stop, draining, token revocation, grpc.health.v1 and
// readiness.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { RELAXED_LIMITS, query } from '../../../test/support/auth.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { TestConfigSource, agentConnector, announceConfig, endpointResource, testTokens, type TestAgent } from '../../../test/support/edge-channel.ts';
import { makeCa, makeLeaf } from '../../../test/support/certificates.ts';
import { ConnectRequestSchema, type ConnectResponse } from '../../../shared/gen/edge/v1/control_pb.ts';
import { edgeControlService } from '../../../shared/src/proto/edge-control.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL } from './contracts.ts';

const TOKEN_ID = randomUUID();
const OTHER_TOKEN_ID = randomUUID();
const source = new TestConfigSource();
const cp = await startTestControlPlane(t, {
  env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual', EDGE_HEARTBEAT_INTERVAL_MS: '1000' },
  services: { edgeConfig: source, edgeAgentTokens: testTokens({ 'agt_good': TOKEN_ID, 'agt_other': OTHER_TOKEN_ID }) },
});
const port = cp.app.edgeChannel!.port;
await cp.app.edgeChannel!.hub.subscribed;
const good = agentConnector(t, port, 'agt_good');
const other = agentConnector(t, port, 'agt_other');
const connect = good.connect;
const node = async (id: string) => (await query<Record<string, any>>(cp, `select * from cdn_edge_node where id = ?`, [id]))[0];
const nodeCount = async () => (await query<{ n: number }>(cp, `select count(*)::int as n from cdn_edge_node`))[0]!.n;

t.test('a stream without a valid agent token is refused with UNAUTHENTICATED and registers nothing', async (t) => {
  for (const token of [null, 'agt_wrong', '']) {
    const agent = good.raw(token);
    agent.hello();
    const status = await agent.status;
    t.equal(status.code, grpc.status.UNAUTHENTICATED, `token ${JSON.stringify(token)}`);
    t.same(agent.kinds(), [], 'nothing sent to it');
  }
  t.equal(await nodeCount(), 0);
});

t.test('the first message must be a valid Hello: INVALID_ARGUMENT otherwise, nothing stored', async (t) => {
  const cases: [string, (a: TestAgent) => void, RegExp][] = [
    ['a heartbeat first', (a) => a.heartbeat({ status: 'ok' }), /first message must be Hello/],
    ['node_id not a uuid', (a) => a.hello({ nodeId: 'node-1' }), /node_id/],
    ['hostname with a control character', (a) => a.hello({ hostname: 'edge\u0000one' }), /hostname/],
    ['hostname too long', (a) => a.hello({ hostname: 'h'.repeat(254) }), /hostname/],
    ['empty region', (a) => a.hello({ region: '' }), /region/],
    ['region too long', (a) => a.hello({ region: 'r'.repeat(65) }), /region/],
    // Checked by the feeds that read them (the configuration and purge feeds).
    ['config_version beyond 2^53', (a) => a.hello({ configVersion: 2 ** 60 }), /config_version is out of range/],
    ['purge_sequence beyond 2^53', (a) => a.hello({ purgeSequence: 2 ** 60 }), /purge_sequence is out of range/],
  ];
  for (const [what, send, details] of cases) {
    const agent = good.raw();
    send(agent);
    const status = await agent.status;
    t.equal(status.code, grpc.status.INVALID_ARGUMENT, what);
    t.match(status.details, details, what);
  }
  t.equal(await nodeCount(), 0);
});

t.test('Hello registers the node online and Welcome carries the intervals, the latest purge sequence and the active version', async (t) => {
  const published = source.publish([endpointResource(randomUUID())]);
  await announceConfig(cp.app.store, published);
  const { agent, welcome } = await connect({ hostname: 'edge-a.example.net', region: 'eu-west', agentVersion: '2.3.4', configVersion: published.version });
  t.equal(welcome.nodeId, agent.nodeId);
  t.equal(welcome.heartbeatIntervalMs, 1000);
  t.equal(welcome.trafficReportIntervalMs, 60000);
  t.equal(welcome.purgeSequence, 0n, 'no purge yet');
  t.equal(welcome.configVersion, BigInt(published.version));
  const row = await node(agent.nodeId);
  t.match(row, {
    hostname: 'edge-a.example.net', region: 'eu-west', status: 'online', agent_version: '2.3.4', config_version: String(published.version),
    replica_id: cp.app.edgeChannel!.replicaId, agent_token_id: TOKEN_ID, failed_config_version: null, config_error: null,
  });
  t.ok(row!.connected_at && row!.last_seen_at, 'connected_at and last_seen_at set');
  // Every stream gets the shield map after Welcome (channel-shield.ts), a moment later: awaited so the check sees all of the opening.
  await agent.next('shieldMap');
  t.same(agent.kinds(), ['welcome', 'shieldMap'], 'an agent already on the active version gets no configuration');
});

t.test('a second stream of the same node replaces the first (ABORTED); the node stays online', async (t) => {
  const { agent: first } = await connect();
  const before = await node(first.nodeId);
  const { agent: second } = await connect({ nodeId: first.nodeId });
  const status = await first.status;
  t.equal(status.code, grpc.status.ABORTED);
  t.match(status.details, /replaced by a newer stream/);
  await cp.app.edgeChannel!.hub.flush();
  const after = await node(first.nodeId);
  t.equal(after!.status, 'online', 'the old stream ending does not take the node offline');
  t.ok(new Date(after!.connected_at) > new Date(before!.connected_at), 'the newer stream owns the node');
  t.notOk(second.ended);
});

t.test('the node goes offline as soon as its stream ends', async (t) => {
  const { agent } = await connect();
  t.equal((await node(agent.nodeId))!.status, 'online');
  agent.close();
  await eventually(async () => (await node(agent.nodeId))!.status === 'offline', 'node offline after the stream ended');
});

t.test('heartbeats: last_seen_at, draining, cache size; a draining node that comes back is online', async (t) => {
  const { agent } = await connect();
  const registered = await node(agent.nodeId);
  agent.heartbeat({ status: 'draining', cacheObjects: 12n, cacheBytes: 3456n });
  await eventually(async () => (await node(agent.nodeId))!.status === 'draining', 'draining');
  const draining = await node(agent.nodeId);
  t.ok(new Date(draining!.last_seen_at) >= new Date(registered!.last_seen_at));
  t.equal(draining!.cache_objects, '12');
  t.equal(draining!.cache_bytes, '3456');
  agent.heartbeat({ status: 'ok', cacheObjects: 13n, cacheBytes: 4000n });
  await eventually(async () => (await node(agent.nodeId))!.status === 'online', 'online again');
});

t.test('a node whose heartbeats stop is marked offline by the sweep (any replica), and online again at its next heartbeat', async (t) => {
  const { agent } = await connect();
  await query(cp, `update cdn_edge_node set last_seen_at = now() - interval '1 hour' where id = ?`, [agent.nodeId]);
  const swept = await cp.app.edgeChannel!.hub.sweep();
  t.ok(swept.includes(agent.nodeId));
  t.equal((await node(agent.nodeId))!.status, 'offline');
  agent.heartbeat({ status: 'ok' });
  await eventually(async () => (await node(agent.nodeId))!.status === 'online', 'online at the next heartbeat');
});

t.test('revoking an agent token closes that token\'s streams at once (UNAUTHENTICATED), not the others', async (t) => {
  const { agent: revoked } = await other.connect();
  const { agent: kept } = await connect();
  await cp.app.store.publish(AGENT_TOKEN_REVOKED_CHANNEL, JSON.stringify({ id: OTHER_TOKEN_ID }));
  const status = await revoked.status;
  t.equal(status.code, grpc.status.UNAUTHENTICATED);
  t.match(status.details, /revoked/);
  await eventually(async () => (await node(revoked.nodeId))!.status === 'offline', 'the revoked node is offline');
  t.notOk(kept.ended);
});

t.test('regression: a revocation announced while a stream waits for its Hello (token checked, node not yet registered) refuses it at its Hello', async (t) => {
  // The announcement closed the streams registered under the token; one still opening was not among them and
  // lived on under a revoked token.
  const opening = other.raw();
  await new Promise((resolve) => setTimeout(resolve, 200)); // its token is checked at once; it has not said Hello
  await cp.app.store.publish(AGENT_TOKEN_REVOKED_CHANNEL, JSON.stringify({ id: OTHER_TOKEN_ID }));
  opening.hello();
  const status = await Promise.race([opening.status, new Promise<null>((resolve) => setTimeout(() => resolve(null), 5_000))]);
  t.equal(status?.code, grpc.status.UNAUTHENTICATED, 'refused, not left open');
  t.match(status?.details, /revoked/);
  t.notOk(opening.kinds().includes('welcome'), 'no Welcome');
  opening.close();
  // The test verifier knows nothing of revocations: a stream whose token is checked after the revocation is
  // the verifier's to judge, and is not refused by the memory of it.
  const { agent: later } = await other.connect();
  t.notOk(later.ended);
  later.close();
});

t.test('regression: a revocation announced while the subscription was down still closes the streams once it is back', async (t) => {
  const { agent: revoked } = await other.connect();
  const { agent: kept } = await connect();
  const row = `insert into cdn_agent_token (id, name, token_hash, token_hint, status, created_at, updated_at) values (?, ?, ?, 'agt_xxxx', ?, now(), now())
    on conflict (id) do update set status = excluded.status`;
  await query(cp, row, [TOKEN_ID, 'good', 'a'.repeat(64), 'active']);
  await query(cp, row, [OTHER_TOKEN_ID, 'other', 'b'.repeat(64), 'revoked']);
  t.equal(await cp.app.edgeChannel!.hub.recheckTokens(), 1, 'one stream closed');
  const status = await revoked.status;
  t.equal(status.code, grpc.status.UNAUTHENTICATED);
  t.notOk(kept.ended, 'the stream of the active token stays');
});

t.test('grpc.health.v1 answers SERVING; readiness reports edge_config ok', async (t) => {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  t.teardown(() => client.close());
  const status = await new Promise<number>((resolve, reject) => {
    client.makeUnaryRequest('/grpc.health.v1.Health/Check', (v: Buffer) => v, (b: Buffer) => b, Buffer.from([0x0a, 0x00]), (error, value) => {
      if (error) return reject(error);
      // HealthCheckResponse { status = 1 (SERVING) }: field 1, varint.
      resolve(value![1]!);
    });
  });
  t.equal(status, 1, 'SERVING');
  const ready = await cp.request('GET', '/v1/cdn/health/ready');
  t.equal(ready.status, 200);
  t.same(ready.body.components.edge_config, { status: 'ok', latency_ms: null });
});

t.test('TLS: with GRPC_TLS_CERT_FILE and GRPC_TLS_KEY_FILE the channel speaks TLS only', async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'grpc-tls-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const ca = await makeCa('Channel test CA');
  const leaf = await makeLeaf(ca, ['localhost']);
  await fs.writeFile(path.join(dir, 'cert.pem'), leaf.certPem);
  await fs.writeFile(path.join(dir, 'key.pem'), leaf.keyPem);
  const secure = await startTestControlPlane(t, {
    env: { GRPC_TLS_CERT_FILE: path.join(dir, 'cert.pem'), GRPC_TLS_KEY_FILE: path.join(dir, 'key.pem') },
    services: { edgeConfig: new TestConfigSource(), edgeAgentTokens: testTokens({ agt_good: TOKEN_ID }) },
  });
  t.equal(secure.app.edgeChannel!.tls, true);
  const address = `127.0.0.1:${secure.app.edgeChannel!.port}`;
  const client = new grpc.Client(address, grpc.credentials.createSsl(Buffer.from(ca.pem)), { 'grpc.ssl_target_name_override': 'localhost', 'grpc.use_local_subchannel_pool': 1 });
  t.teardown(() => client.close());
  const metadata = new grpc.Metadata();
  metadata.set('authorization', 'Bearer agt_good');
  const { path: method, requestSerialize, responseDeserialize } = edgeControlService.connect;
  const call = client.makeBidiStreamRequest(method, requestSerialize as (v: unknown) => Buffer, responseDeserialize, metadata);
  const welcome = new Promise<string | undefined>((resolve, reject) => {
    call.on('data', (m: ConnectResponse) => resolve(m.message.case));
    call.on('error', reject);
  });
  const nodeId = randomUUID();
  call.write(create(ConnectRequestSchema, { message: { case: 'hello', value: { nodeId, hostname: 'edge-tls', region: 'eu-west' } } }));
  t.equal(await welcome, 'welcome', 'Welcome over TLS');
  call.cancel();

  const plain = agentConnector(t, secure.app.edgeChannel!.port, 'agt_good').raw();
  plain.hello();
  const status = await plain.status;
  t.equal(status.code, grpc.status.UNAVAILABLE, 'a plaintext client gets nowhere');
});
