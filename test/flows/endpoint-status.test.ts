// An endpoint's status follows the configuration versions that change what it
// serves, tried with processes: a control plane (manual publish), two agents
// (one paused while a version propagates) and an origin. A change to a
// response headers policy the endpoint uses makes it `deploying` until every
// online node has that version (it used to read `active` throughout: the
// policy is a resource of its own); a tags-only update, which publishes
// nothing, leaves it `active` (it used to read `deploying` with nothing to
// deploy).
import t from 'tap';
import { eventually } from '../support/eventually.ts';
import { agentHealth, endpointOn, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('an endpoint reads deploying while a changed policy it uses propagates, and stays active after a tags-only update', { timeout: 120_000 }, async (t) => {
    const origin = await startCountingOrigin(t);
    // Heartbeats every 5 s: the paused agent stays online (a target) for the 15 s it takes to look.
    const deployment = await startDeployment(t, { postgresUrl, env: { EDGE_HEARTBEAT_INTERVAL_MS: '5000' } });
    const policy = await deployment.must('POST', '/v1/cdn/response-headers-policies', {
      name: 'stamp', custom_response_headers: [{ name: 'X-Stamp', value: 'one', override: true }],
    });
    const endpoint = await endpointOn(deployment, origin.port, 'status', { response_headers_policy_id: policy.id });
    const steady = await startEdgeAgent(t, deployment, deployment.grpcPort, 'steady');
    const paused = await startEdgeAgent(t, deployment, deployment.grpcPort, 'paused');
    t.teardown(() => { paused.child.kill('SIGCONT'); });
    await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes?status=online')).data.length === 2, 'both agents online');
    const read = () => deployment.must('GET', `/v1/cdn/endpoints/${endpoint.id}`);
    await deployment.must('POST', '/v1/cdn/config/publish', { description: 'first' });
    await eventually(async () => (await read()).status === 'active', 'active once both nodes have it');
    t.equal((await viewerGet(steady.port, endpoint.hostname, '/x')).headers['x-stamp'], 'one');

    // Tags only: nothing the edge sees changed, nothing to publish, nothing to wait for.
    await deployment.must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { tags: ['video'] });
    t.match(await read(), { status: 'active', tags: ['video'] }, 'a tags-only update leaves it active');
    await deployment.must('POST', '/v1/cdn/config/publish', { description: 'tags' });
    t.equal((await read()).status, 'active', 'still active after a publish');

    // The policy changes while one node is paused: the endpoint waits for that node.
    await deployment.must('PATCH', `/v1/cdn/response-headers-policies/${policy.id}`, { custom_response_headers: [{ name: 'X-Stamp', value: 'two', override: true }] });
    t.equal((await read()).status, 'deploying', 'a changed policy it uses makes it deploying');
    paused.child.kill('SIGSTOP');
    const { version_number: version } = await deployment.must('POST', '/v1/cdn/config/publish', { description: 'policy' });
    await eventually(async () => (await agentHealth(steady)).config_version === version, 'the steady node applied it');
    await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes')).data.some((n: any) => n.hostname === 'steady' && n.config_version === version), 'the steady node\'s version recorded');
    t.equal((await viewerGet(steady.port, endpoint.hostname, '/x')).headers['x-stamp'], 'two');
    t.equal((await read()).status, 'deploying', 'deploying while the paused node, online, lacks the policy');
    paused.child.kill('SIGCONT');
    await eventually(async () => (await read()).status === 'active', 'active once every online node has the policy');
    t.equal((await viewerGet(paused.port, endpoint.hostname, '/x')).headers['x-stamp'], 'two');
  });
}
