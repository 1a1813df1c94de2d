// Forwarding loops through the edge (RFC 8586), with a control-plane process,
// a shield agent, an edge agent and an origin as processes: an endpoint whose
// origin is the edge itself makes a bounded number of edge requests for one
// viewer request and answers it 508 (GET, POST, Range, Authorization; with and
// without a shield region); two shield regions whose configurations disagree
// about which of them shields an endpoint never bounce a request between them.
import t from 'tap';
import {
  agentMetrics, endpointOn, metricSum, publishedToAll, shieldsKnown, startCountingOrigin, startDeployment, startEdgeAgent, startShieldAgent, viewerGet, viewerRequest, type AgentProcess,
} from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { detectServices } from '../support/services.ts';

const TOKEN = 'streaming-platform-cdn';
/** A loaded host must not make a shield look offline (3 silent intervals) and drop it from the shield map mid-test. */
const SLOW_HEARTBEATS = { EDGE_HEARTBEAT_INTERVAL_MS: '2000' };

/** What the agents answered for an endpoint, viewers' requests and shield hops alike: all of them, and those with a 5xx. */
async function answered(agents: AgentProcess[], endpoint: string): Promise<{ all: number; failed: number }> {
  let all = 0;
  let failed = 0;
  for (const agent of agents) {
    const text = await agentMetrics(agent);
    for (const name of ['edge_requests_total', 'edge_shield_requests_total']) {
      all += metricSum(text, name, { endpoint });
      failed += metricSum(text, name, { endpoint, status_class: '5xx' });
    }
  }
  return { all, failed };
}

const { postgresUrl } = await detectServices();
if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else {
  await t.test('an endpoint whose origin is the edge itself: one viewer request makes a bounded number of edge requests and is answered 508 at once', { timeout: 240_000 }, async (t) => {
    const deployment = await startDeployment(t, { postgresUrl, env: SLOW_HEARTBEATS });
    const shield = await startShieldAgent(t, deployment, 'loop-shield', 'shield-r');
    const edge = await startEdgeAgent(t, deployment, deployment.grpcPort, 'loop-edge', { REGION: 'edge-r' });
    const agents = [shield, edge];
    await shieldsKnown(agents, ['shield-r']);
    // Both origins are the edge agent itself.
    const plain = await endpointOn(deployment, edge.port, 'loop');
    const shielded = await endpointOn(deployment, edge.port, 'loop shielded', { shield_region: 'shield-r' });
    await publishedToAll(deployment, agents, 'loops');

    // Arrivals carry 0..3 of our entries and are passed on; the fifth arrival (4 entries) is refused. A range miss
    // asks for the slice holding it instead of the viewer's range (no second chain: there is no background fill).
    const cases: [string, string, string, Record<string, string>, string | undefined, number][] = [
      ['GET', 'GET', '/loop/get', {}, undefined, 5],
      ['POST', 'POST', '/loop/post', { 'content-type': 'text/plain' }, 'a body', 5],
      ['Range', 'GET', '/loop/range', { range: 'bytes=0-9' }, undefined, 5],
      ['Authorization', 'GET', '/loop/auth', { authorization: 'Bearer viewer-token' }, undefined, 5],
    ];
    for (const [kind, method, path, headers, body, expected] of cases) {
      await t.test(`${kind}: ${expected} edge requests, then 508 for the viewer`, async (t) => {
        const before = await answered(agents, plain.id);
        const res = await viewerRequest(edge.port, plain.hostname, method, path, headers, body);
        t.equal(res.status, 508);
        t.match(res.body, /^Loop detected: this request has already passed through this CDN 4 times/);
        t.equal(res.headers['cache-control'], 'no-store');
        await eventually(async () => {
          const now = await answered(agents, plain.id);
          return now.all - before.all === expected && now.failed - before.failed === expected;
        }, `${kind}: ${expected} edge requests, every one answered 508`);
      });
    }

    await t.test('nothing was kept: the same GET loops and is refused again', async (t) => {
      const before = await answered(agents, plain.id);
      t.equal((await viewerGet(edge.port, plain.hostname, '/loop/get')).status, 508);
      await eventually(async () => (await answered(agents, plain.id)).all - before.all === 5, 'five edge requests again');
    });

    await t.test('through the shield: the edge and its shield take turns, five requests in all, then 508', async (t) => {
      for (const headers of [{}, { authorization: 'Bearer viewer-token' }] as Record<string, string>[]) {
        const before = { edge: await answered([edge], shielded.id), shield: await answered([shield], shielded.id) };
        const res = await viewerGet(edge.port, shielded.hostname, `/loop/shielded-${Object.keys(headers).length}`, headers);
        t.equal(res.status, 508, res.body);
        await eventually(async () => (await answered([edge], shielded.id)).all - before.edge.all === 3 && (await answered([shield], shielded.id)).all - before.shield.all === 2,
          'three arrivals at the edge (0, 2, 4 entries), two hops at the shield (1, 3 entries)');
      }
    });

    await t.test('a viewer sending our entry four times is refused before the cache; other CDNs\' entries do not count', async (t) => {
      const four = Array(4).fill(TOKEN).join(', ');
      t.equal((await viewerGet(edge.port, plain.hostname, '/loop/get', { 'cdn-loop': four })).status, 508);
      const before = await answered(agents, plain.id);
      const res = await viewerGet(edge.port, plain.hostname, '/loop/get', { 'cdn-loop': `other-cdn, ${TOKEN}; loops=9, other-cdn, ${TOKEN.toUpperCase()}, ${TOKEN}` });
      t.equal(res.status, 508, 'three of ours came with it: one more pass, and the next arrival is refused');
      await eventually(async () => (await answered(agents, plain.id)).all - before.all === 2, 'two edge requests');
    });
  });

  await t.test('two shield regions whose configurations disagree about which is the shield never bounce a request: a hop goes to the origin', { timeout: 240_000 }, async (t) => {
    const deployment = await startDeployment(t, { postgresUrl, env: SLOW_HEARTBEATS });
    const seen: { url: string; loop: string | undefined }[] = [];
    const origin = await startCountingOrigin(t, (req) => { seen.push({ url: req.url!, loop: req.headers['cdn-loop'] as string | undefined }); });
    const a = await startShieldAgent(t, deployment, 'shield-a', 'r1');
    // B serves one endpoint at most: it refuses the second version whole and keeps the first.
    const b = await startShieldAgent(t, deployment, 'shield-b', 'r2', { MAX_ENDPOINTS: '1' });
    const edge = await startEdgeAgent(t, deployment, deployment.grpcPort, 'skew-edge', { REGION: 'edge-r' });
    await shieldsKnown([a, b, edge], ['r1', 'r2']);
    const endpoint = await endpointOn(deployment, origin.port, 'skewed', { shield_region: 'r1' });
    await publishedToAll(deployment, [a, b, edge], 'shielded in r1');
    await deployment.must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { shield_region: 'r2' });
    await endpointOn(deployment, origin.port, 'second');
    await publishedToAll(deployment, [a, edge], 'shielded in r2');
    await eventually(() => b.logs.some((l) => l.includes('MAX_ENDPOINTS')), 'B refused the second version');

    // A and the edge take B (r2) for the shield; B, still on the first version, takes A (r1).
    for (const [name, agent, path] of [['the edge', edge, '/skew/edge'], ['A', a, '/skew/a'], ['B', b, '/skew/b']] as const) {
      await t.test(`a viewer of ${name}: one hop to the other shield, which asks the origin`, async (t) => {
        const before = await answered([a, b, edge], endpoint.id);
        const res = await viewerGet(agent.port, endpoint.hostname, path);
        t.equal(res.status, 200, res.body);
        t.equal(seen.filter((s) => s.url === path).length, 1, 'one origin request');
        t.equal(seen.find((s) => s.url === path)!.loop, `${TOKEN}, ${TOKEN}`, 'the asking agent\'s CDN-Loop entry, then the shield\'s');
        await eventually(async () => (await answered([a, b, edge], endpoint.id)).all - before.all === 2, 'the viewer\'s request and one hop');
      });
    }
  });
}
