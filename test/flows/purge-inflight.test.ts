// A path purge covers fills already in flight (issue 21 item 6), tried as an
// operator would: a control-plane process, an edge-agent process, and an
// origin that holds its answer for /held across the purge. A viewer's miss
// reaches the origin, the purge is submitted through the API and reads
// completed, then the origin answers the old content: the viewer that asked
// gets it, and the next viewer is not served it from the cache (it used to be
// a HIT for the object's whole TTL).
import http from 'node:http';
import t from 'tap';
import { eventually } from '../support/eventually.ts';
import { publishedEndpoint, startDeployment, startEdgeAgent, viewerGet } from '../support/edge-deployment.ts';
import { detectServices } from '../support/services.ts';

const services = await detectServices();
if (!services.postgresUrl) {
  t.pass('skipped: needs PostgreSQL');
} else {
  const { postgresUrl } = services;
  await t.test('regression: a miss in flight across a path purge does not leave the old object cached', { timeout: 120_000 }, async (t) => {
    let version = 1;
    let held: (() => void) | null = null;
    let arrived: () => void = () => {};
    const arrival = new Promise<void>((resolve) => { arrived = resolve; });
    const origin = http.createServer((req, res) => {
      const answer = `${req.url} v${version}`;
      const send = () => {
        res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
        res.end(answer);
      };
      if (req.url === '/held' && version === 1 && held === null) {
        held = send;
        arrived();
      } else send();
    });
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise<void>((resolve) => { origin.closeAllConnections(); origin.close(() => resolve()); }));
    const originPort = (origin.address() as { port: number }).port;

    const deployment = await startDeployment(t, { postgresUrl });
    const endpoint = await publishedEndpoint(deployment, originPort, 'in flight');
    const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'agent');
    await eventually(async () => (await viewerGet(agent.port, endpoint.hostname, '/ready')).status === 200, 'the agent serves the endpoint');

    const viewer = viewerGet(agent.port, endpoint.hostname, '/held');
    await arrival;
    version = 2; // the content changes at the origin while the old answer is on its way, and the publisher purges
    const purge = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/held'] });
    await eventually(async () => (await deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the purge reads completed');
    held!();
    t.equal((await viewer).body, '/held v1', 'the viewer that asked before the purge gets the answer it waited for');
    const next = await viewerGet(agent.port, endpoint.hostname, '/held');
    t.not(next.headers['x-cache-status'], 'HIT', 'the old object was not cached after the purge');
    t.equal(next.body, '/held v2');
    t.equal((await viewerGet(agent.port, endpoint.hostname, '/held')).headers['x-cache-status'], 'HIT', 'the new one is');
  });
}
