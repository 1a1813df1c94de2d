// Edge nodes and origin health through the real server (document 3 §2
// "Origin health", "Edge node", §4.13): agents' origin probes arrive in
// heartbeats and read worst-case over the nodes online now, on the health
// route and the origin's health_status; the edge-nodes list with its filters,
// paging and roles.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { RELAXED_LIMITS, query } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeOrigin } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { TestConfigSource, agentConnector, announceConfig, endpointResource, testTokens } from '../../../test/support/edge-channel.ts';

const source = new TestConfigSource();
const cp = await startTestControlPlane(t, {
  env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual' },
  services: { edgeConfig: source, edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
});
const port = cp.app.edgeChannel!.port;
await cp.app.edgeChannel!.hub.subscribed;
const send = caller(cp);
const { admin, viewer, subscriber } = await cdnCallers(cp);
const { connect } = agentConnector(t, port, 'agt_good');
const nodeStatus = async (id: string) => (await query<{ status: string }>(cp, `select status from cdn_edge_node where id = ?`, [id]))[0]!.status;

t.test('origin health: the worst case over the nodes online now, on the health route and the origin record', async (t) => {
  const origin = await makeOrigin(cp, admin);
  const health = async () => (await send(viewer, 'GET', `/v1/cdn/origins/${origin.id}/health`)).body;
  const record = async () => (await send(viewer, 'GET', `/v1/cdn/origins/${origin.id}`)).body;
  t.match(await health(), { origin_id: origin.id, status: 'unknown', latency_ms: null, checked_at: null, consecutive_failures: 0 }, 'unknown before any probe');

  const { agent: x } = await connect({ hostname: 'edge-x' });
  const { agent: y } = await connect({ hostname: 'edge-y' });
  const t0 = Date.parse('2026-11-20T10:00:00Z');
  x.heartbeat({
    status: 'ok',
    origins: [
      { originId: origin.id, status: 'healthy', latencyMs: 20, lastSuccessAtMs: BigInt(t0 + 5_000), consecutiveFailures: 0, checkedAtMs: BigInt(t0 + 5_000) },
      { originId: randomUUID(), status: 'healthy', latencyMs: 1, checkedAtMs: BigInt(t0) },
      { originId: 'not-a-uuid', status: 'healthy' },
    ],
  });
  y.heartbeat({
    status: 'ok',
    origins: [{
      originId: origin.id, status: 'degraded', latencyMs: 80, lastSuccessAtMs: BigInt(t0), lastFailureAtMs: BigInt(t0 + 3_000),
      failureReason: 'slow\u0000 answers', consecutiveFailures: 2, checkedAtMs: BigInt(t0 + 3_000),
    }],
  });
  await eventually(async () => (await health()).status === 'degraded', 'degraded: the worse of the two');
  t.same(await health(), {
    origin_id: origin.id, status: 'degraded', latency_ms: 80, last_success_at: new Date(t0 + 5_000).toISOString(), last_failure_at: new Date(t0 + 3_000).toISOString(),
    failure_reason: 'slow  answers', consecutive_failures: 2, checked_at: new Date(t0 + 5_000).toISOString(),
  });
  t.equal((await record()).health_status, 'degraded', 'the origin shows the same status');
  const listed = await send(viewer, 'GET', '/v1/cdn/origins?health_status=degraded');
  t.ok(listed.body.data.some((o: { id: string }) => o.id === origin.id), 'and filters by it');

  y.close();
  await eventually(async () => (await health()).status === 'healthy', 'healthy once the degraded node is offline');
  t.match(await health(), { latency_ms: 20, failure_reason: null, consecutive_failures: 0 });
  await eventually(async () => (await record()).health_status === 'healthy', 'the origin record follows');

  x.heartbeat({ status: 'ok', origins: [{ originId: origin.id, status: 'bogus', latencyMs: 5, checkedAtMs: BigInt(t0 + 9_000) }] });
  await eventually(async () => (await health()).status === 'unknown', 'an unknown status reads unknown');
  x.close();
  await eventually(async () => (await nodeStatus(x.nodeId)) === 'offline', 'x offline');
  t.match(await health(), { status: 'unknown', latency_ms: null, last_success_at: null }, 'no node online: nothing measured');
  await eventually(async () => (await record()).health_status === 'unknown', 'the origin record follows');
});

t.test('GET /v1/cdn/edge-nodes: by hostname, filters status, region and config_synced, paging, roles; bad filters 400', async (t) => {
  await query(cp, `update cdn_edge_node set status = 'offline'`);
  const v1 = source.publish([endpointResource(randomUUID())]);
  await announceConfig(cp.app.store, v1);
  const { agent: synced } = await connect({ hostname: 'n1-synced', region: 'eu-west', configVersion: v1.version });
  const { agent: behind } = await connect({ hostname: 'n2-behind', region: 'us-east', configVersion: 0 });
  await behind.next('configUpdate');
  behind.heartbeat({ status: 'draining' });
  await eventually(async () => (await nodeStatus(behind.nodeId)) === 'draining', 'draining');
  const list = async (q = '', who = viewer) => send(who, 'GET', `/v1/cdn/edge-nodes${q}`);

  const all = await list();
  t.equal(all.status, 200, all.text);
  const names = all.body.data.map((n: { hostname: string }) => n.hostname);
  t.same(names, [...names].sort(), 'ordered by hostname');
  const first = all.body.data.find((n: { id: string }) => n.id === synced.nodeId);
  t.same(Object.keys(first).sort(), ['agent_version', 'config_error', 'config_synced', 'config_version', 'failed_config_version', 'hostname', 'id', 'last_seen_at', 'purge_sequence', 'region', 'status'].sort());
  t.match(first, { hostname: 'n1-synced', region: 'eu-west', status: 'online', config_version: v1.version, config_synced: true });
  t.ok(!Number.isNaN(Date.parse(first.last_seen_at)));
  t.equal(all.body.meta.total, all.body.data.length);

  const ids = async (q: string) => (await list(q)).body.data.map((n: { id: string }) => n.id);
  t.same(await ids('?status=online'), [synced.nodeId]);
  t.same(await ids('?status=draining'), [behind.nodeId]);
  t.same(await ids('?region=us-east'), [behind.nodeId]);
  t.same(await ids('?config_synced=true'), [synced.nodeId]);
  t.ok((await ids('?config_synced=false')).includes(behind.nodeId));
  t.notOk((await ids('?config_synced=false')).includes(synced.nodeId));
  t.same(await ids('?status=online&region=us-east'), []);

  const page1 = await list('?limit=1');
  t.equal(page1.body.data.length, 1);
  t.equal(page1.body.meta.has_more, true);
  const page2 = await list(`?limit=1&cursor=${page1.body.meta.next_cursor}`);
  t.not(page2.body.data[0].id, page1.body.data[0].id);

  for (const q of ['?status=broken', '?config_synced=maybe', '?limit=0', '?region=', '?sort=hostname', '?cursor=garbage']) {
    const res = await list(q);
    t.equal(res.status, 400, `${q} → 400`);
  }
  t.equal((await list('', subscriber)).status, 403, 'a subscriber without a CDN role: 403');
  t.equal((await send(null, 'GET', '/v1/cdn/edge-nodes')).status, 401);
  t.equal((await list('', admin)).status, 200);
});
