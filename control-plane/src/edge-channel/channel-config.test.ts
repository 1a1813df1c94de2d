// Configuration pushes through the real channel (issue 12 items 3 and 4):
// the whole configuration to a node with nothing, deltas of only what changed
// since the acknowledged version (digest and count of the target), one
// encoding shared by every stream on the same base, acks moving the node's
// applied version and endpoints deploying → active, nacks recorded and never
// re-sent, base_mismatch answered once with a full push, propagation counts.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { RELAXED_LIMITS, query } from '../../../test/support/auth.ts';
import { cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import {
  TestConfigSource, agentConnector, announceConfig, endpointResource, policyResource, testTokens, type TestAgent,
} from '../../../test/support/edge-channel.ts';
import type { ConfigUpdate } from '../../../shared/gen/edge/v1/control_pb.ts';
import { BASE_MISMATCH_PREFIX } from './channel-config.ts';

const source = new TestConfigSource();
const cp = await startTestControlPlane(t, {
  env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual', CDN_DOMAIN: 'edge.example.net' },
  services: { edgeConfig: source, edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
});
const port = cp.app.edgeChannel!.port;
await cp.app.edgeChannel!.hub.subscribed;
const { connect } = agentConnector(t, port, 'agt_good');
const node = async (id: string) => (await query<Record<string, any>>(cp, `select * from cdn_edge_node where id = ?`, [id]))[0]!;
const endpointStatus = async (id: string) => (await query<{ status: string }>(cp, `select status from cdn_endpoint where id = ?`, [id]))[0]!.status;
const keys = (update: ConfigUpdate) => update.resources.map((r) => r.key).sort();

// The versions come from the in-test ConfigSource; each gets a row in the configuration versions' table
// (as a superseded one, so the real active version is untouched) for propagation_completed_at to land on.
const completedAt = async (version: number) =>
  (await query<{ at: Date | null }>(cp, `select propagation_completed_at as at from cdn_config_version where version_number = ?`, [version]))[0]?.at ?? null;

const { admin } = await cdnCallers(cp);
const e1 = (await makeEndpoint(cp, admin)).endpoint.id;
const e2 = (await makeEndpoint(cp, admin)).endpoint.id;
const p1 = randomUUID();
const p2 = randomUUID();

async function publish(resources: ReturnType<typeof endpointResource>[]) {
  const version = source.publish(resources);
  await query(cp, `insert into cdn_config_version (id, version_number, description, status, validation_errors, digest, resource_count, config_revision, created_at, updated_at)
    values (?, ?, 'test', 'superseded', '[]', ?, 0, 0, now(), now())`, [version.id, version.version, version.digest]);
  await announceConfig(cp.app.store, version);
  return version;
}

let a: TestAgent;
let b: TestAgent;

t.test('a node with nothing gets the whole configuration; its ack records the applied version and activates the endpoints', async (t) => {
  const v1 = await publish([endpointResource(e1), endpointResource(e2), policyResource(p1)]);
  t.equal(await endpointStatus(e1), 'deploying');
  ({ agent: a } = await connect({ hostname: 'edge-a' }));
  const full = await a.next('configUpdate');
  t.match(full, { version: 1n, full: true, baseVersion: 0n, removed: [], digest: v1.digest, resourceCount: 3 });
  t.same(keys(full), [`endpoint/${e1}`, `endpoint/${e2}`, `response_headers_policy/${p1}`].sort());
  const e1Body = full.resources.find((r) => r.key === `endpoint/${e1}`)!;
  t.same(Buffer.from(e1Body.body), Buffer.from(endpointResource(e1).body), 'the resource body as published');
  t.equal(e1Body.sha256, endpointResource(e1).sha256);
  t.equal(e1Body.version, 1n);
  t.same(await cp.app.edgeFleet.propagation(1), { total_nodes: 1, synced_nodes: 0, pending_nodes: 1, failed_nodes: 0 }, 'pending until acked');
  await cp.app.edgeChannel!.hub.flush();
  t.equal(await endpointStatus(e1), 'deploying', 'not active before the ack');
  t.equal(await completedAt(1), null);

  a.ackConfig(full);
  await eventually(async () => (await node(a.nodeId)).config_version === '1', 'applied version recorded');
  await eventually(async () => (await endpointStatus(e1)) === 'active' && (await endpointStatus(e2)) === 'active', 'endpoints active');
  t.same(await cp.app.edgeFleet.propagation(1), { total_nodes: 1, synced_nodes: 1, pending_nodes: 0, failed_nodes: 0 });
  await eventually(async () => (await completedAt(1)) !== null, 'propagation_completed_at set');
});

t.test('a publish sends only what changed since the acknowledged version; agents on one base share one encoding; endpoints wait for every node', async (t) => {
  ({ agent: b } = await connect({ hostname: 'edge-b', configVersion: 1 }));
  await b.next('shieldMap'); // sent to every stream after Welcome, a moment later
  t.same(b.kinds(), ['welcome', 'shieldMap'], 'a node on the active version gets no configuration');
  const callsBefore = source.bodyCalls;
  const v2 = await publish([endpointResource(e1, 2), endpointResource(e2), policyResource(p2)]);
  // As the configuration side does when a publish changes an endpoint (after it: before, v1 would already cover it).
  await query(cp, `update cdn_endpoint set status = 'deploying' where id = ?`, [e1]);
  const [toA, toB] = await Promise.all([a.next('configUpdate'), b.next('configUpdate')]);
  for (const delta of [toA, toB]) {
    t.match(delta, { version: 2n, full: false, baseVersion: 1n, removed: [`response_headers_policy/${p1}`], digest: v2.digest, resourceCount: 3 });
    t.same(keys(delta), [`endpoint/${e1}`, `response_headers_policy/${p2}`].sort(), 'only the changed and the new resource');
    t.equal(delta.resources.find((r) => r.key === `endpoint/${e1}`)!.version, 2n);
  }
  t.equal(toA.nonce, toB.nonce, 'one encoding (one nonce) for both streams');
  t.equal(source.bodyCalls - callsBefore, 1, 'the bodies were read once');

  a.ackConfig(toA);
  await eventually(async () => (await node(a.nodeId)).config_version === '2', 'A applied v2');
  await cp.app.edgeChannel!.hub.flush();
  t.equal(await endpointStatus(e1), 'deploying', 'still deploying while B has not applied it');
  t.equal(await completedAt(2), null);
  t.same(await cp.app.edgeFleet.propagation(2), { total_nodes: 2, synced_nodes: 1, pending_nodes: 1, failed_nodes: 0 });
  b.ackConfig(toB);
  await eventually(async () => (await endpointStatus(e1)) === 'active', 'active once every online node applied it');
  await eventually(async () => (await completedAt(2)) !== null, 'propagation completed');
});

t.test('a nack is recorded, counted as failed, and that version is not sent again on that stream; a reconnecting node is offered it again; the next publish supersedes it', async (t) => {
  await publish([endpointResource(e1, 3), endpointResource(e2), policyResource(p2)]);
  const [toA, toB] = await Promise.all([a.next('configUpdate'), b.next('configUpdate')]);
  t.equal(toA.version, 3n);
  a.ackConfig(toA, false, 'endpoint e1: route\u0000 refers to a missing origin');
  b.ackConfig(toB);
  await eventually(async () => (await node(a.nodeId)).failed_config_version === '3', 'refusal recorded');
  const refused = await node(a.nodeId);
  t.equal(refused.config_version, '2', 'the node keeps its applied version');
  t.equal(refused.config_error, 'endpoint e1: route  refers to a missing origin', 'the error detail, control characters removed');
  await eventually(async () => (await node(b.nodeId)).config_version === '3', 'B applied v3');
  t.same(await cp.app.edgeFleet.propagation(3), { total_nodes: 2, synced_nodes: 1, pending_nodes: 0, failed_nodes: 1 });
  await eventually(async () => (await completedAt(3)) !== null, 'no node pending: propagation complete (with a failure)');
  // Regression (issue 21 item 8): the endpoint whose change A refused used to read active (or deploying for ever).
  await eventually(async () => (await endpointStatus(e1)) === 'error', 'e1 reads error while an online node refuses its latest change');
  const [withReason] = await query<{ status_reason: string }>(cp, `select status_reason from cdn_endpoint where id = ?`, [e1]);
  t.equal(withReason!.status_reason, 'Edge node edge-a refused configuration version 3: endpoint e1: route  refers to a missing origin');
  t.equal(await endpointStatus(e2), 'active', 'an endpoint the refused version did not change stays active');

  // Regression (issue 21 item 8): the node reconnects with its version 2 (restarted, perhaps fixed): version 3 is offered again.
  a.close();
  ({ agent: a } = await connect({ nodeId: a.nodeId, hostname: 'edge-a', configVersion: 2 }));
  const again = await a.next('configUpdate');
  t.match(again, { version: 3n, full: false, baseVersion: 2n }, 'the refused version is offered again on the new stream');
  a.ackConfig(again, false, 'still refused');
  await eventually(async () => (await node(a.nodeId)).config_error === 'still refused', 'refused again');
  const v4 = await publish([endpointResource(e1, 4), endpointResource(e2), policyResource(p2)]);
  const next = await a.next('configUpdate');
  t.match(next, { version: 4n, full: false, baseVersion: 2n, digest: v4.digest }, 'the next version, diffed from the applied one, supersedes it');
  t.same(keys(next), [`endpoint/${e1}`]);
  t.same(a.kinds().filter((k) => k === 'configUpdate'), ['configUpdate', 'configUpdate'], 'version 3 once on this stream, then version 4');
  a.ackConfig(next);
  const toB4 = await b.next('configUpdate');
  b.ackConfig(toB4);
  await eventually(async () => (await node(a.nodeId)).config_version === '4', 'applied v4');
  const after = await node(a.nodeId);
  t.equal(after.config_error, null, 'the error clears once a later version applies');
  t.equal(after.failed_config_version, null, 'the refusal clears once a later version applies');
  await eventually(async () => (await endpointStatus(e1)) === 'active', 'e1 active once every online node applied its latest change');
  t.same(await query(cp, `select status_reason from cdn_endpoint where id = ?`, [e1]), [{ status_reason: null }]);
});

t.test('base_mismatch: answered once with a full push of the version; a full push refused again is recorded', async (t) => {
  const { agent: c } = await connect({ hostname: 'edge-c', configVersion: 2 });
  const delta = await c.next('configUpdate');
  t.match(delta, { version: 4n, full: false, baseVersion: 2n });
  c.ackConfig(delta, false, `${BASE_MISMATCH_PREFIX} digest differs after applying`);
  const full = await c.next('configUpdate');
  t.match(full, { version: 4n, full: true, baseVersion: 0n, resourceCount: 3 });
  t.equal(full.resources.length, 3);
  c.ackConfig(full, false, `${BASE_MISMATCH_PREFIX} still different`);
  await eventually(async () => (await node(c.nodeId)).failed_config_version === '4', 'the second refusal is recorded');
  t.match((await node(c.nodeId)).config_error, /^base_mismatch: still different/);

  const { agent: d } = await connect({ hostname: 'edge-d', configVersion: 2 });
  const dDelta = await d.next('configUpdate');
  d.ackConfig(dDelta, false, `${BASE_MISMATCH_PREFIX} base 2 not held`);
  const dFull = await d.next('configUpdate');
  t.equal(dFull.full, true);
  d.ackConfig(dFull);
  await eventually(async () => (await node(d.nodeId)).config_version === '4', 'applied from the full push');
  t.equal((await node(d.nodeId)).failed_config_version, null, 'a base mismatch answered by a full push is no refusal');
});

t.test('a node holding a version that cannot be diffed from gets the whole configuration; an ack that matches no push changes nothing', async (t) => {
  const { agent: e } = await connect({ hostname: 'edge-e', configVersion: 99 });
  const full = await e.next('configUpdate');
  t.match(full, { version: 4n, full: true });
  e.ackConfig({ ...full, nonce: 'not-the-nonce' } as ConfigUpdate);
  e.ackConfig({ ...full, version: 3n } as ConfigUpdate);
  await cp.app.edgeChannel!.hub.flush();
  t.equal((await node(e.nodeId)).config_version, '99', 'acks for another push are ignored');
  e.ackConfig(full);
  await eventually(async () => (await node(e.nodeId)).config_version === '4', 'the ack of the full push sets the applied version');
});
