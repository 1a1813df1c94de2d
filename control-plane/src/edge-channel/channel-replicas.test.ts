// Two control-plane replicas on one PostgreSQL and one Redis (DESIGN.md §9;
// issue 12 item 7): agents split between them all receive a purge submitted
// on either, its status counts the acks recorded by both, a publish and a
// prefetch reach the agents of both; a node that moves to the other replica
// is released by the first; agents of a replica that stops reconnect to the
// other and catch up on what they missed.
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { RELAXED_LIMITS, bearer, query } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { TestConfigSource, agentConnector, announceConfig, endpointResource, testTokens, type HelloInit } from '../../../test/support/edge-channel.ts';
import { detectServices } from '../../../test/support/services.ts';
import { entities } from '../capabilities.ts';
import { openDatabase } from '../db/orm.ts';
import { startControlPlane } from '../server.ts';
import { createStore } from '../store/index.ts';

const services = await detectServices();

t.test('two replicas: purges, publishes and prefetches reach the agents of both; status counts every ack', { skip: !(services.postgresUrl && services.redisUrl) && 'needs PostgreSQL and Redis' }, async (t) => {
  const source = new TestConfigSource();
  const seams = { edgeConfig: source, edgeAgentTokens: testTokens({ agt_good: randomUUID() }) };
  const a = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual' }, services: seams });
  const dbB = await openDatabase({ databaseUrl: a.database.url, dataDir: a.config.dataDir, entities, poolMax: 4 });
  const storeB = createStore(a.config.REDIS_URL, a.storeKeyPrefix);
  const b = await startControlPlane(a.config, { db: dbB, store: storeB, services: seams });
  let bClosed = false;
  t.teardown(async () => {
    if (!bClosed) await b.close();
    await storeB.close();
    await dbB.close();
  });
  await Promise.all([a.app.edgeChannel!.hub.subscribed, b.app.edgeChannel!.hub.subscribed]);
  t.not(a.app.edgeChannel!.replicaId, b.app.edgeChannel!.replicaId);
  const toA = agentConnector(t, a.app.edgeChannel!.port, 'agt_good');
  const toB = agentConnector(t, b.app.edgeChannel!.port, 'agt_good');
  const connect = async (cp: typeof a | typeof b, hello: HelloInit = {}) => (await (cp === a ? toA : toB).connect(hello)).agent;
  const send = caller(a);
  const { admin, operator } = await cdnCallers(a);
  const { endpoint } = await makeEndpoint(a, admin);
  const node = async (id: string) => (await query<Record<string, any>>(a, `select * from cdn_edge_node where id = ?`, [id]))[0]!;

  const onA = await connect(a, { hostname: 'edge-on-a' });
  const onB = await connect(b, { hostname: 'edge-on-b' });
  t.equal((await node(onA.nodeId)).replica_id, a.app.edgeChannel!.replicaId);
  t.equal((await node(onB.nodeId)).replica_id, b.app.edgeChannel!.replicaId);

  // A purge submitted on A reaches the agent on B too; both acks count.
  const purge = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })).body;
  const [pa, pb] = await Promise.all([onA.next('purge'), onB.next('purge')]);
  t.equal(pa.purgeId, purge.id);
  t.equal(pb.purgeId, purge.id);
  onA.ackPurge(pa);
  onB.ackPurge(pb);
  const read = async () => (await send(operator, 'GET', `/v1/cdn/purge/${purge.id}`)).body;
  await eventually(async () => (await read()).status === 'completed', 'completed');
  t.match(await read(), { edge_nodes_total: 2, edge_nodes_completed: 2 });

  // A publish announced once reaches both replicas' agents.
  const v1 = source.publish([endpointResource(endpoint.id)]);
  await announceConfig(a.app.store, v1);
  const [ca, cb] = await Promise.all([onA.next('configUpdate'), onB.next('configUpdate')]);
  t.equal(ca.version, 1n);
  t.equal(cb.version, 1n);
  onA.ackConfig(ca);
  onB.ackConfig(cb);
  await eventually(async () => (await node(onA.nodeId)).config_version === '1' && (await node(onB.nodeId)).config_version === '1', 'both applied');
  t.same(await b.app.edgeFleet.propagation(1), { total_nodes: 2, synced_nodes: 2, pending_nodes: 0, failed_nodes: 0 });

  // A prefetch submitted through B goes to the agents of both.
  const onReplicaB = await fetch(`${b.url}/v1/cdn/endpoints/${endpoint.id}/prefetch`, {
    method: 'POST', headers: { ...bearer(operator.accessToken), 'content-type': 'application/json' }, body: JSON.stringify({ urls: [`https://${endpoint.hostname}/x.mp4`] }),
  });
  t.equal(onReplicaB.status, 202);
  const job = await onReplicaB.json() as { id: string };
  const [ja, jb] = await Promise.all([onA.next('prefetchJob'), onB.next('prefetchJob')]);
  t.equal(ja.jobId, job.id);
  onA.ackPrefetch(ja);
  onB.ackPrefetch(jb);
  await eventually(async () => (await send(operator, 'GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${job.id}`)).body.status === 'completed', 'prefetch completed');

  // The agent on A moves to B: A lets its old stream go; the node stays online, now on B.
  const moved = await connect(b, { nodeId: onA.nodeId, hostname: 'edge-on-a', configVersion: 1, purgeSequence: purge.sequence });
  const old = await onA.status;
  t.equal(old.code, grpc.status.ABORTED);
  t.match(old.details, /another control-plane replica/);
  await a.app.edgeChannel!.hub.flush();
  t.match(await node(onA.nodeId), { status: 'online', replica_id: b.app.edgeChannel!.replicaId });

  // B stops: its agents are told to go elsewhere; one reconnects to A and catches up on a purge submitted meanwhile.
  const survivor = await connect(a, { hostname: 'edge-survivor', purgeSequence: purge.sequence });
  await b.close();
  bClosed = true;
  const ended = await moved.status;
  t.equal(ended.code, grpc.status.UNAVAILABLE);
  t.same(await b.app.edgeConfigHealth!(), { status: 'degraded', latency_ms: null }, 'a stopped channel reports degraded for readiness');
  await eventually(async () => (await node(moved.nodeId)).status === 'offline', 'offline once its replica stopped');
  const missed = (await send(operator, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })).body;
  t.equal((await survivor.next('purge')).purgeId, missed.id);
  const back = await connect(a, { nodeId: moved.nodeId, hostname: 'edge-on-a', configVersion: 1, purgeSequence: purge.sequence });
  t.equal((await back.next('purge')).purgeId, missed.id, 'the missed purge arrives on reconnect');
});
