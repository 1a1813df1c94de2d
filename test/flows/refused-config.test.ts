// A node that refused a configuration is offered it again once fixed (issue
// 21 item 8), with processes: a control plane, an origin, and an agent sized
// for one endpoint (MAX_ENDPOINTS=1). A second endpoint is published: the
// agent refuses the version, and the endpoint reads error naming the node and
// its reason (it used to read deploying, or active, while the node kept the
// previous version). The agent restarts with MAX_ENDPOINTS=5 on the same data
// directory (the same node): on reconnecting it is offered the active version
// again (it used to wait for an unrelated publish), applies it, serves the
// second endpoint, and the endpoint reads active; the node no longer reads a
// failed_config_version (it used to keep the version it went on to apply).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { eventually } from '../support/eventually.ts';
import { agentHealth, publishedEndpoint, startCountingOrigin, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('regression: a refused version is offered again to the node once it reconnects, fixed; the endpoint reads error meanwhile; the refusal clears once it applied it', { timeout: 120_000 }, async (t) => {
    const origin = await startCountingOrigin(t);
    const deployment = await startDeployment(t, { postgresUrl });
    const first = await publishedEndpoint(deployment, origin.port, 'first');
    const dataDir = mkdtempSync(join(tmpdir(), 'sp-refusing-agent-'));
    const small = await startEdgeAgent(t, deployment, deployment.grpcPort, 'small', { DATA_DIR: dataDir, MAX_ENDPOINTS: '1' });
    await eventually(async () => (await viewerGet(small.port, first.hostname, '/x')).status === 200, 'the agent serves the first endpoint');

    const second = await publishedEndpoint(deployment, origin.port, 'second');
    const read = () => deployment.must('GET', `/v1/cdn/endpoints/${second.id}`);
    await eventually(async () => (await read()).status === 'error', 'the second endpoint reads error');
    t.match((await read()).status_reason, /^Edge node small refused configuration version \d+: .*exceed this node's limit of 1 \(MAX_ENDPOINTS\)/);
    t.equal((await viewerGet(small.port, second.hostname, '/x')).status, 421, 'the agent does not serve it');
    const [node] = (await deployment.must('GET', '/v1/cdn/edge-nodes')).data;
    t.ok(node.failed_config_version > node.config_version, 'the node list shows the refusal');

    // Fixed: restarted with room for more endpoints, on the same data directory (the same node id).
    small.child.kill('SIGTERM');
    await new Promise((resolve) => small.child.once('exit', resolve));
    const fixed = await startEdgeAgent(t, deployment, deployment.grpcPort, 'small', { DATA_DIR: dataDir, MAX_ENDPOINTS: '5' });
    await eventually(async () => (await viewerGet(fixed.port, second.hostname, '/x')).status === 200, 'offered again on reconnecting, it applies the version and serves the second endpoint');
    await eventually(async () => (await read()).status === 'active', 'the endpoint reads active');
    t.equal((await read()).status_reason, null);
    const active = (await deployment.must('GET', '/v1/cdn/config/versions?limit=1')).data[0];
    t.equal((await agentHealth(fixed)).config_version, active.version_number, 'without another publish: the node holds the active version');
    await eventually(async () => (await deployment.must('GET', '/v1/cdn/edge-nodes')).data[0].config_version === active.version_number, 'the node list shows the version applied');
    t.match((await deployment.must('GET', '/v1/cdn/edge-nodes')).data[0], { failed_config_version: null, config_error: null }, 'the refusal clears once the node applied that version');
  });

  await t.test('MAX_ENDPOINTS applies to the sealed configuration an agent starts from: one larger is not served, with a line saying why', { timeout: 120_000 }, async (t) => {
    const origin = await startCountingOrigin(t);
    const deployment = await startDeployment(t, { postgresUrl });
    const endpoints = [await publishedEndpoint(deployment, origin.port, 'one'), await publishedEndpoint(deployment, origin.port, 'two')];
    const dataDir = mkdtempSync(join(tmpdir(), 'sp-shrunk-agent-'));
    const roomy = await startEdgeAgent(t, deployment, deployment.grpcPort, 'shrunk', { DATA_DIR: dataDir });
    for (const e of endpoints) await eventually(async () => (await viewerGet(roomy.port, e.hostname, '/x')).status === 200, 'the agent serves both endpoints');
    roomy.child.kill('SIGTERM');
    await new Promise((resolve) => roomy.child.once('exit', resolve));

    // Restarted smaller with the control plane out of reach: all it has is the sealed configuration of two endpoints.
    const unreachable = await startTcpProxy('127.0.0.1', deployment.grpcPort);
    unreachable.refuseNew(true);
    t.teardown(() => unreachable.cut());
    const small = await startEdgeAgent(t, deployment, unreachable.port, 'shrunk', { DATA_DIR: dataDir, MAX_ENDPOINTS: '1' });
    const line = small.logs.find((l) => l.includes('MAX_ENDPOINTS'));
    t.ok(line, 'one line says why');
    t.match(JSON.parse(line!), { level: 50, endpoints: 2, max_endpoints: 1, msg: /more endpoints than this node's limit \(MAX_ENDPOINTS\): starting without it/ });
    t.notOk(small.logs.some((l) => l.includes('serving the configuration persisted in DATA_DIR')), 'it does not say it serves it');
    for (const e of endpoints) t.equal((await viewerGet(small.port, e.hostname, '/x')).status, 421, `it serves neither endpoint (${e.hostname})`);
    t.equal((await agentHealth(small)).config_version, 0, 'it holds no configuration');
  });
}
