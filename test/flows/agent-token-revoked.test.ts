// An agent whose token was revoked says so (issue 26 item 5), with processes:
// a control plane and an agent connected to it. The token is revoked through
// the API: the control plane closes the agent's stream, and the agent's
// /healthz answers 503 with status unauthorized and the reason (no longer
// `ok`), and its log says it once, without the token.
import t from 'tap';
import { eventually } from '../support/eventually.ts';
import { agentHealthUrl, startDeployment, startEdgeAgent, type AgentHealth } from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('a revoked agent token: /healthz answers 503 unauthorized with the reason, and the agent logs it once', { timeout: 120_000 }, async (t) => {
    const deployment = await startDeployment(t, { postgresUrl });
    const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'revoked');
    const health = async () => {
      const res = await fetch(agentHealthUrl(agent));
      return { code: res.status, body: await res.json() as AgentHealth };
    };
    await eventually(async () => agent.logs.some((l) => l.includes('connected to the control plane')), 'the agent is connected');
    t.match(await health(), { code: 200, body: { status: 'ok', control_plane_token_refused: null } });

    const [token] = (await deployment.must('GET', '/v1/cdn/agent-tokens')).data.filter((k: { name: string }) => k.name === 'test agents');
    t.equal((await deployment.api('DELETE', `/v1/cdn/agent-tokens/${token.id}`)).status, 204);
    await eventually(async () => (await health()).code === 503, 'the agent reports the refusal');
    const refused = await health();
    t.match(refused.body, { status: 'unauthorized', control_plane_token_refused: { code: 'UNAUTHENTICATED', reason: /revoked/, since: String } });
    t.ok(Date.parse(refused.body.control_plane_token_refused!.since) > 0);

    const said = agent.logs.filter((l) => l.includes('refused the agent token'));
    t.equal(said.length, 1, 'logged once');
    t.match(said[0], /"level":50.*agent token revoked/);
    t.notOk(agent.logs.some((l) => l.includes(deployment.agentToken)), 'the token never reaches the log');
  });
}
