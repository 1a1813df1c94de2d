// A purge that timed out as `failed` (a target did not apply it within
// EDGE_PURGE_TIMEOUT_MS) moves on to `completed` once that node has applied
// it after all, as docs/guides/purge.md says, tried with real processes: a control
// plane, an agent that keeps up and one that is paused (SIGSTOP) or stopped
// past the timeout. The late node's answer may never arrive as an
// acknowledgement (the stream it was pushed on is gone by the time the node
// runs again, or the node restarts with an empty cache and has nothing the
// purge could remove): its purge sequence reaching the purge's says it.
import http from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import pg from 'pg';
import { eventually } from '../support/eventually.ts';
import {
  agentHealth, publishedEndpoint, startDeployment, startEdgeAgent, viewerGet, type AgentProcess, type Deployment,
} from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('a node paused past EDGE_PURGE_TIMEOUT_MS that then applies the purge moves it from failed to completed', { timeout: 120_000 }, (tt) => paused(tt, postgresUrl));
  await t.test('a node that comes back with an empty cache after the timeout moves the purge from failed to completed', { timeout: 120_000 }, (tt) => restarted(tt, postgresUrl));
}

/** An origin whose /p answers its current version, cacheable for 5 minutes. */
async function versionedOrigin(t: Test) {
  let version = 1;
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
    res.end(`${req.url} v${version}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return { port: (server.address() as { port: number }).port, bump: () => { version++; } };
}

interface Setup {
  deployment: Deployment;
  host: string;
  endpointId: string;
  steady: AgentProcess;
  late: AgentProcess;
  lateDir: string;
  origin: Awaited<ReturnType<typeof versionedOrigin>>;
}

async function setUp(t: Test, postgresUrl: string): Promise<Setup> {
  const origin = await versionedOrigin(t);
  // Small intervals: a node silent for 3 heartbeats (3 s) is offline, a purge waits 2 s for its targets.
  const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_HEARTBEAT_INTERVAL_MS: '1000', EDGE_PURGE_TIMEOUT_MS: '2000' } });
  const endpoint = await publishedEndpoint(deployment, origin.port, 'late-purge');
  const lateDir = mkdtempSync(join(tmpdir(), 'sp-agent-late-'));
  const [steady, late] = await Promise.all([
    startEdgeAgent(t, deployment, deployment.grpcPort, 'steady'),
    startEdgeAgent(t, deployment, deployment.grpcPort, 'late', { DATA_DIR: lateDir }),
  ]);
  await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes?status=online')).data.length === 2, 'both agents online');
  for (const agent of [steady, late]) {
    await eventually(async () => (await viewerGet(agent.port, endpoint.hostname, '/p')).status === 200, 'the agent serves the endpoint');
    t.equal((await viewerGet(agent.port, endpoint.hostname, '/p')).headers['x-cache-status'], 'HIT', '/p cached');
  }
  return { deployment, host: endpoint.hostname, endpointId: endpoint.id, steady, late, lateDir, origin };
}

/** Purges /p (changed at the origin) while the late node is a target that does not answer, and waits for the timeout to fail it. */
async function purgeTimingOut(t: Test, s: Setup): Promise<{ id: string; sequence: number }> {
  s.origin.bump();
  const purge = await s.deployment.must('POST', `/v1/cdn/endpoints/${s.endpointId}/purge`, { purge_type: 'path', paths: ['/p'] });
  t.equal(purge.edge_nodes_total, 2, 'both nodes were online when it was stored');
  const read = () => s.deployment.must('GET', `/v1/cdn/purge/${purge.id}`);
  await eventually(async () => (await read()).status === 'failed', 'failed once EDGE_PURGE_TIMEOUT_MS passed without the late node');
  t.match(await read(), { status: 'failed', edge_nodes_total: 2, edge_nodes_completed: 1 }, 'the steady node applied it, the late one did not');
  t.equal((await viewerGet(s.steady.port, s.host, '/p')).body, '/p v2', 'the steady node serves the new content');
  const [ack] = await lateAcks(s, purge.id);
  t.match(ack, { ok: false, error: /within 2 seconds$/ }, 'the late node counts failed, naming why');
  return purge;
}

async function lateNodeId(s: Setup): Promise<string> {
  const nodes = (await s.deployment.must('GET', '/v1/cdn/edge-nodes')).data as { id: string; hostname: string }[];
  return nodes.find((n) => n.hostname === 'late')!.id;
}

async function lateAcks(s: Setup, purgeId: string): Promise<{ ok: boolean; error: string | null }[]> {
  const client = new pg.Client({ connectionString: s.deployment.database.url });
  await client.connect();
  try {
    return (await client.query(`select ok, error from cdn_purge_ack where purge_id = $1 and node_id = $2`, [purgeId, await lateNodeId(s)])).rows;
  } finally {
    await client.end();
  }
}

/** The purge reads completed with both nodes counted, its completion time moved on, and the late node's state ok. */
async function completesAfterAll(t: Test, s: Setup, purge: { id: string }): Promise<void> {
  const read = () => s.deployment.must('GET', `/v1/cdn/purge/${purge.id}`);
  const failedAt = (await read()).completed_at as string;
  await eventually(async () => (await read()).status === 'completed', 'completed once the late node applied it');
  const done = await read();
  t.match(done, { status: 'completed', edge_nodes_total: 2, edge_nodes_completed: 2 });
  t.ok(Date.parse(done.completed_at) >= Date.parse(failedAt), 'completed_at is when it completed');
  t.match(await lateAcks(s, purge.id), [{ ok: true, error: null }], "the late node's state reads applied");
  t.equal((await viewerGet(s.late.port, s.host, '/p')).body, '/p v2', 'the late node serves the new content');
}

async function paused(t: Test, postgresUrl: string) {
  const s = await setUp(t, postgresUrl);
  s.late.child.kill('SIGSTOP');
  t.teardown(() => { s.late.child.kill('SIGCONT'); });
  const purge = await purgeTimingOut(t, s);
  await eventually(async () => (await s.deployment.must('GET', '/v1/cdn/edge-nodes?status=offline')).data.some((n: any) => n.hostname === 'late'), 'the paused node offline');
  s.late.child.kill('SIGCONT');
  await eventually(async () => (await agentHealth(s.late)).purge_sequence >= purge.sequence, 'the late node applied the purge');
  await completesAfterAll(t, s, purge);
}

async function restarted(t: Test, postgresUrl: string) {
  const s = await setUp(t, postgresUrl);
  s.late.child.kill('SIGSTOP');
  const purge = await purgeTimingOut(t, s);
  s.late.child.kill('SIGKILL');
  await eventually(async () => (await s.deployment.must('GET', '/v1/cdn/edge-nodes?status=offline')).data.some((n: any) => n.hostname === 'late'), 'the stopped node offline');
  // The same node (its DATA_DIR keeps its id) with an empty memory cache: nothing the purge could remove.
  s.late = await startEdgeAgent(t, s.deployment, s.deployment.grpcPort, 'late', { DATA_DIR: s.lateDir });
  await eventually(async () => (await agentHealth(s.late)).purge_sequence >= purge.sequence, 'the late node is past the purge');
  await completesAfterAll(t, s, purge);
}
