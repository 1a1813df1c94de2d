// "completed" means purged (issue 21 item 5), tried as an operator would: a
// control-plane process, one agent connected directly and one whose control
// stream runs through a TCP proxy the test freezes and cuts while viewers
// keep asking that agent for the object. A purge stored while the cut agent
// was online stays in progress (it used to read completed with the online
// nodes' acks alone) until the agent is back and has applied it, or, past
// EDGE_PURGE_TIMEOUT_MS, reads failed naming the node. Cut off for 3
// heartbeat intervals, the agent revalidates every cached object with the
// origin before serving it (CACHE_WHEN_DISCONNECTED=revalidate, the default),
// so the purged copy is not served; with `serve` it keeps serving its cache.
import http from 'node:http';
import t, { type Test } from 'tap';
import { eventually } from '../support/eventually.ts';
import {
  agentHealth, publishedEndpoint, startDeployment, startEdgeAgent, viewerGet, type AgentProcess, type Deployment,
} from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('revalidate (the default): cut off, the agent asks the origin before serving; the purge waits for it and completes once it is back', { timeout: 180_000 }, (tt) => revalidating(tt, postgresUrl));
  await t.test('serve: cut off, the agent keeps serving its cache; the purge it misses reads failed after EDGE_PURGE_TIMEOUT_MS, then completed once it is back', { timeout: 180_000 }, (tt) => serving(tt, postgresUrl));
}

/** An origin whose /p answers its current version with an ETag (and 304 to a matching If-None-Match); counts what it is asked. */
async function versionedOrigin(t: Test) {
  let version = 1;
  const asked: { path: string; conditional: boolean }[] = [];
  const server = http.createServer((req, res) => {
    asked.push({ path: req.url ?? '', conditional: req.headers['if-none-match'] !== undefined });
    const etag = `"v${version}"`;
    if (req.headers['if-none-match'] === etag) {
      res.writeHead(304, { etag, 'cache-control': 'public, max-age=300' });
      return res.end();
    }
    res.writeHead(200, { 'content-type': 'text/plain', etag, 'cache-control': 'public, max-age=300' });
    res.end(`${req.url} v${version}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return {
    port: (server.address() as { port: number }).port,
    asked,
    /** The content changes, as a publisher's does before it purges. */
    bump: () => { version++; },
  };
}

interface Setup {
  deployment: Deployment;
  host: string;
  endpointId: string;
  direct: AgentProcess;
  cut: AgentProcess;
  proxy: TcpProxy;
  origin: Awaited<ReturnType<typeof versionedOrigin>>;
}

async function setUp(t: Test, postgresUrl: string, env: Record<string, string>, cutEnv: Record<string, string>): Promise<Setup> {
  const origin = await versionedOrigin(t);
  const deployment = await startDeployment(t, { postgresUrl, env });
  const endpoint = await publishedEndpoint(deployment, origin.port, 'partition');
  const proxy = await startTcpProxy('127.0.0.1', deployment.grpcPort);
  t.teardown(() => proxy.cut());
  const [direct, cut] = await Promise.all([
    startEdgeAgent(t, deployment, deployment.grpcPort, 'direct'),
    startEdgeAgent(t, deployment, proxy.port, 'behind-proxy', cutEnv),
  ]);
  await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes?status=online')).data.length === 2, 'both agents online');
  for (const agent of [direct, cut]) {
    await eventually(async () => (await viewerGet(agent.port, endpoint.hostname, '/p')).status === 200, 'the agent serves the endpoint');
    t.equal((await viewerGet(agent.port, endpoint.hostname, '/p')).headers['x-cache-status'], 'HIT', '/p cached');
  }
  return { deployment, host: endpoint.hostname, endpointId: endpoint.id, direct, cut, proxy, origin };
}

/** Freezes the cut agent's stream (it stays online for the control plane a moment), changes /p at the origin and purges it: the cut agent is one of the purge's targets and never gets it. */
async function purgeWhileFrozen(t: Test, s: Setup): Promise<{ id: string; sequence: number }> {
  s.proxy.freeze(true);
  s.origin.bump();
  const purge = await s.deployment.must('POST', `/v1/cdn/endpoints/${s.endpointId}/purge`, { purge_type: 'path', paths: ['/p'] });
  t.equal(purge.edge_nodes_total, 2, 'both nodes were online when it was stored');
  await eventually(async () => (await s.deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).edge_nodes_completed === 1, 'the direct agent applied it');
  const fresh = await viewerGet(s.direct.port, s.host, '/p');
  t.equal(fresh.body, '/p v2', 'the direct agent serves the new content');
  // The stream is cut for good: the agent sees it end, the control plane marks the node offline.
  s.proxy.refuseNew(true);
  s.proxy.drop();
  s.proxy.freeze(false);
  await eventually(async () => (await s.deployment.must('GET', '/v1/cdn/edge-nodes?status=offline')).data.some((n: any) => n.hostname === 'behind-proxy'), 'the cut agent offline');
  return purge;
}

async function revalidating(t: Test, postgresUrl: string) {
  const s = await setUp(t, postgresUrl, { EDGE_HEARTBEAT_INTERVAL_MS: '1000' }, {});
  const purge = await purgeWhileFrozen(t, s);
  const read = () => s.deployment.must('GET', `/v1/cdn/purge/${purge.id}`);
  t.match(await read(), { status: 'in_progress', edge_nodes_total: 2, edge_nodes_completed: 1, completed_at: null }, 'not completed: the cut agent has not applied it');

  await eventually(async () => (await agentHealth(s.cut)).control_plane_cut_off === true, 'the agent counts itself cut off after 3 heartbeat intervals');
  const askedBefore = s.origin.asked.length;
  const served = await viewerGet(s.cut.port, s.host, '/p');
  t.equal(served.body, '/p v2', 'cut off, it does not serve the purged copy');
  t.not(served.headers['x-cache-status'], 'HIT');
  t.ok(s.origin.asked.slice(askedBefore).some((a) => a.path === '/p' && a.conditional), 'it revalidated its copy with the origin (a conditional request)');
  t.equal((await agentHealth(s.cut)).purge_sequence < purge.sequence, true, 'and it still lacks the purge');
  t.match(await read(), { status: 'in_progress', edge_nodes_completed: 1 }, 'the purge still waits for it');
  const node = (await s.deployment.must('GET', '/v1/cdn/edge-nodes?status=offline')).data.find((n: any) => n.hostname === 'behind-proxy');
  t.ok(node.purge_sequence < purge.sequence, 'the edge-node list shows it without the purge');

  s.proxy.refuseNew(false);
  // The agent retries with capped exponential backoff (up to 30 s between attempts).
  await eventually(async () => (await read()).status === 'completed', 'completed once the agent is back and applied it', 90_000);
  t.match(await read(), { edge_nodes_total: 2, edge_nodes_completed: 2 });
  await eventually(async () => (await agentHealth(s.cut)).control_plane_cut_off === false, 'no longer cut off');
  await viewerGet(s.cut.port, s.host, '/p');
  t.equal((await viewerGet(s.cut.port, s.host, '/p')).headers['x-cache-status'], 'HIT', 'back, it serves from its cache again');
}

async function serving(t: Test, postgresUrl: string) {
  const s = await setUp(t, postgresUrl, { EDGE_HEARTBEAT_INTERVAL_MS: '1000', EDGE_PURGE_TIMEOUT_MS: '3000' }, { CACHE_WHEN_DISCONNECTED: 'serve' });
  const purge = await purgeWhileFrozen(t, s);
  const read = () => s.deployment.must('GET', `/v1/cdn/purge/${purge.id}`);
  await eventually(async () => (await agentHealth(s.cut)).control_plane_cut_off === true, 'the agent counts itself cut off');
  const served = await viewerGet(s.cut.port, s.host, '/p');
  t.equal(served.headers['x-cache-status'], 'HIT', 'availability first: it keeps serving its cache');
  t.equal(served.body, '/p v1', 'the copy the purge was for, as the stated staleness allows');

  await eventually(async () => (await read()).status === 'failed', 'failed once EDGE_PURGE_TIMEOUT_MS passed without the cut agent');
  t.match(await read(), { edge_nodes_total: 2, edge_nodes_completed: 1 });
  t.ok((await read()).completed_at);

  s.proxy.refuseNew(false);
  await eventually(async () => (await read()).status === 'completed', 'the agent back and the purge applied: completed', 90_000);
  t.match(await read(), { edge_nodes_completed: 2 });
  t.equal((await viewerGet(s.cut.port, s.host, '/p')).body, '/p v2', 'the purged copy is gone');
}
