// Two deployments sharing one Redis server (issue 21 item 4): two
// control-plane processes on two databases and one Redis, each with an edge
// agent. Redis pub/sub ignores the database number, and the channels were
// fixed names: each deployment pushed the other's purges to its agents,
// which then skipped its own purges of the same sequence numbers (a purge
// stuck pending while the object stayed a HIT). Every key and channel is now
// in the deployment's namespace (the database's deployment id), and an
// announcement not published by the replica itself is checked against its
// own database before anything is pushed (so two deployments forced into one
// namespace, REDIS_NAMESPACE, stay apart too).
import t, { type Test } from 'tap';
import { eventually } from '../support/eventually.ts';
import {
  agentHealth, publishedEndpoint, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet, type Deployment,
} from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!(services.postgresUrl && services.redisUrl)) {
  t.pass('skipped: needs PostgreSQL and Redis');
} else {
  const { postgresUrl, redisUrl } = services;
  await t.test('deployments on their derived namespaces: each agent gets its own deployment\'s purges only', { timeout: 240_000 }, (tt) => run(tt, postgresUrl, { REDIS_URL: redisUrl }));
  await t.test('deployments forced into one namespace: announcements are checked against each database', { timeout: 240_000 }, (tt) => run(tt, postgresUrl, { REDIS_URL: redisUrl, REDIS_NAMESPACE: `shared-${process.pid}-${Date.now()}` }));
}

async function run(t: Test, postgresUrl: string, env: Record<string, string>) {
  const origin = await startCountingOrigin(t);
  const [a, b] = await Promise.all([startDeployment(t, { postgresUrl, env }), startDeployment(t, { postgresUrl, env })]);
  const [endpointA, endpointB] = await Promise.all([publishedEndpoint(a, origin.port, 'deployment a'), publishedEndpoint(b, origin.port, 'deployment b')]);
  const [agentA, agentB] = await Promise.all([startEdgeAgent(t, a, a.grpcPort, 'agent-a'), startEdgeAgent(t, b, b.grpcPort, 'agent-b')]);
  const online = (d: Deployment) => eventually(async () => (await d.must('GET', '/v1/cdn/edge-nodes?status=online')).data.length === 1, 'the agent online');
  await Promise.all([online(a), online(b)]);
  await eventually(async () => (await viewerGet(agentA.port, endpointA.hostname, '/x')).status === 200 && (await viewerGet(agentB.port, endpointB.hostname, '/x')).status === 200, 'both agents serve their endpoint');

  const warm = async (agent: { port: number }, host: string) => {
    await viewerGet(agent.port, host, '/x');
    t.equal((await viewerGet(agent.port, host, '/x')).headers['x-cache-status'], 'HIT', `/x cached on ${host}`);
  };
  await warm(agentA, endpointA.hostname);
  await warm(agentB, endpointB.hostname);
  const purge = (d: Deployment, endpointId: string) => d.must('POST', `/v1/cdn/endpoints/${endpointId}/purge`, { purge_type: 'path', paths: ['/x'] });
  const completed = (d: Deployment, id: string) => eventually(async () => (await d.must('GET', `/v1/cdn/purge/${id}`)).status === 'completed', `purge ${id} completed`);

  const onA = await purge(a, endpointA.id);
  t.equal(onA.sequence, 1, 'deployment a numbers its first purge 1');
  await completed(a, onA.id);
  t.equal((await viewerGet(agentA.port, endpointA.hostname, '/x')).headers['x-cache-status'], 'MISS', 'purged on a\'s agent');
  t.equal((await agentHealth(agentB)).purge_sequence, 0, 'b\'s agent was sent nothing of a\'s');

  const onB = await purge(b, endpointB.id);
  t.equal(onB.sequence, 1, 'deployment b numbers its first purge 1 too');
  await completed(b, onB.id);
  t.match(await b.must('GET', `/v1/cdn/purge/${onB.id}`), { edge_nodes_total: 1, edge_nodes_completed: 1 });
  t.equal((await viewerGet(agentB.port, endpointB.hostname, '/x')).headers['x-cache-status'], 'MISS', 'b\'s own purge reached its agent and was applied');
  t.equal((await agentHealth(agentA)).purge_sequence, 1, 'a\'s agent applied a\'s purge only');
}
