// Origin shield end to end (issue 23 item 5): a control plane (in this process),
// a counting origin, and three real agent processes in two regions: a shield
// node in `shield-r` (it advertises SHIELD_ADDRESS) and two edge agents in
// `edge-r` (one with two workers). An endpoint whose shield_region is `shield-r` (with signed URLs, so
// its viewers' policies matter): concurrent misses across both edge agents make
// one origin request, the viewer's Cache-Status lists the shield's entry before
// the edge's, a viewer cannot pass as an agent (a forged hop header gets the
// policies), and with the shield gone the edge agents go to the origin directly.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { caller, cdnCallers, mustCaller } from '../support/cdn.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import {
  agentHealth, endpointOn, publishedToAll, shieldsKnown, startCountingOrigin, startDeployment, startEdgeAgent, startShieldAgent, viewerGet, type AgentProcess,
} from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { freePort } from '../support/private-services.ts';
import { detectServices } from '../support/services.ts';

const AGENT_TOKEN = 'agt_edge_shield_flow_test_0123456789';

t.test('with a shield region set, misses across two edge agents make one origin request; a forged hop is a viewer; an unreachable shield sends the edges to the origin', { timeout: 180_000 }, async (t) => {
  const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS }, services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) } });
  const send = caller(cp);
  const { admin, viewer } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  // A slow origin, so the misses of both edges reach the shield while its fill is on its way (collapsed there).
  const originRequests = new Map<string, number>();
  const counted = await startCountingOrigin(t, (req, res) => {
    originRequests.set(req.url!, (originRequests.get(req.url!) ?? 0) + 1);
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
      res.end(`${req.url} from the origin`);
    }, 200);
    return true;
  });
  const env = (name: string, region: string) => ({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: mkdtempSync(join(tmpdir(), `sp-shield-${name}-`)),
    REGION: region, NODE_HOSTNAME: name, SHUTDOWN_TIMEOUT_MS: '1000',
  });

  const shieldPort = await freePort();
  const shield = await startAgentProcess({
    ...env('shield', 'shield-r'), HTTP_PORT: String(shieldPort), SHIELD_ADDRESS: `http://127.0.0.1:${shieldPort}`,
    REGION_NAME: 'Shield region', REGION_COUNTRY: 'de', REGION_CITY: 'Frankfurt',
  });
  t.teardown(() => { shield.child.kill('SIGKILL'); });
  await eventually(async () => (await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data?.some((r: { id: string }) => r.id === 'shield-r'), 'the shield region is listed');
  t.match((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data, [{ id: 'shield-r', name: 'Shield region', location: { country_code: 'DE', city: 'Frankfurt' }, available: true }]);

  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'shielded origin', scheme: 'http', host: '127.0.0.1', port: counted.port, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'shielded', default_origin_id: originRecord.id, shield_region: 'shield-r' });
  const key = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys`, { name: 'player' });
  await must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { token_auth_enabled: true });
  const published = await must('POST', '/v1/cdn/config/publish', { description: 'shielded endpoint' });
  const signed = (path: string) => signPath({ path, expires: Math.floor(Date.now() / 1000) + 600, secret: key.secret as string });

  // The second edge runs two workers: the shield map and its keys reach each of them.
  const edges = [await startAgentProcess(env('edge-1', 'edge-r')), await startAgentProcess({ ...env('edge-2', 'edge-r'), WORKERS: '2' })];
  t.teardown(() => { for (const e of edges) e.child.kill('SIGKILL'); });
  for (const agent of [shield, ...edges]) await eventually(async () => (await agentHealth(agent)).config_version === published.version_number, 'every agent has the endpoint');
  for (const e of edges) await eventually(() => e.logs.some((l) => l.includes('shield map applied') && l.includes('shield-r:1')), 'the edges know the shield');

  await t.test('concurrent misses across both edge agents make one origin request', async (t) => {
    const path = '/video/segment-1.ts';
    const answers = await Promise.all(edges.flatMap((e) => Array.from({ length: 5 }, () => viewerGet(e.port, endpoint.hostname, signed(path)))));
    t.same(answers.map((a) => a.status), Array(10).fill(200));
    t.equal(originRequests.get(path), 1, 'ten misses, two edge agents: one origin request, by the shield');
    const statuses = answers.map((a) => String(a.headers['cache-status']));
    t.ok(statuses.every((s) => /^edge-shield-r; [^,]+, edge-edge-r; /.test(s)), `the shield's Cache-Status entry, then the edge's (${statuses[0]})`);
    t.ok(answers.every((a) => !String(a.headers['x-cache-status']).includes(',')), 'one X-Cache-Status: the edge\'s own');
    const again = await viewerGet(edges[0]!.port, endpoint.hostname, signed(path));
    t.equal(again.headers['x-cache-status'], 'HIT', 'then a hit at the edge');
    t.equal(originRequests.get(path), 1);
  });

  await t.test('a viewer cannot pass as an agent: a forged hop header gets the viewer\'s policies at the shield', async (t) => {
    const forged = await viewerGet(shieldPort, endpoint.hostname, '/video/segment-1.ts', { 'x-edge-shield': `${randomUUID()} ${Math.floor(Date.now() / 1000)} ${'A'.repeat(43)}` });
    t.equal(forged.status, 403, 'unsigned at the shield: refused as any viewer');
    const garbage = await viewerGet(shieldPort, endpoint.hostname, '/video/segment-1.ts', { 'x-edge-shield': 'agent' });
    t.equal(garbage.status, 403);
    t.equal((await viewerGet(shieldPort, endpoint.hostname, signed('/video/segment-1.ts'))).status, 200, 'a signed viewer request at the shield is served as usual');
  });

  await t.test('the shield unreachable: the edge agents go to the origin directly', async (t) => {
    shield.child.kill('SIGKILL');
    await new Promise((r) => shield.child.once('exit', r));
    const path = '/video/segment-2.ts';
    const a = await viewerGet(edges[0]!.port, endpoint.hostname, signed(path));
    const b = await viewerGet(edges[1]!.port, endpoint.hostname, signed(path));
    t.same([a.status, b.status], [200, 200]);
    t.equal(originRequests.get(path), 2, 'each edge asked the origin itself');
    t.notMatch(String(a.headers['cache-status']), 'edge-shield-r', 'no shield entry');
  });
});

const { postgresUrl } = await detectServices();

const regionAvailable = async (deployment: { must(method: string, path: string): Promise<any> }) =>
  (await deployment.must('GET', '/v1/cdn/shield-regions')).data.find((r: { id: string }) => r.id === 'shield-r')?.available;

/** A control-plane process, a shield agent of `shield-r` and two edge agents of `edge-r`, an origin, and an endpoint shielded in `shield-r`. */
async function shieldedDeployment(t: { teardown(fn: () => unknown): void }, handler: Parameters<typeof startCountingOrigin>[1], shieldEnv: { env?: Record<string, string>; address?: string } = {}) {
  // Heartbeats every 2 s: a loaded host must not make the shield look offline (3 intervals) and drop it from the map.
  const deployment = await startDeployment(t, { postgresUrl: postgresUrl!, env: { EDGE_HEARTBEAT_INTERVAL_MS: '2000' } });
  const origin = await startCountingOrigin(t, handler);
  const shield = await startShieldAgent(t, deployment, 'shield', 'shield-r', shieldEnv.env, shieldEnv.address);
  const edges = [await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-1', { REGION: 'edge-r' }), await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-2', { REGION: 'edge-r' })];
  await shieldsKnown([shield, ...edges], ['shield-r']);
  const endpoint = await endpointOn(deployment, origin.port, 'shielded', { shield_region: 'shield-r' });
  await publishedToAll(deployment, [shield, ...edges], 'shielded endpoint');
  return { deployment, origin, shield, edges, endpoint };
}

if (!postgresUrl) t.pass('skipped: needs PostgreSQL');
else await t.test('a tag purge under a shield evicts the tagged objects on every agent, the edges included; viewers never see the tags', { timeout: 240_000 }, async (t) => {
  const tags: Record<string, Record<string, string>> = {
    '/tagged/a.ts': { 'cache-tag': 'video-1, common' },
    '/tagged/b.ts': { 'surrogate-key': 'video-2 common key,with,commas' },
    '/tagged/c.ts': { 'cache-tag': 'other' },
    '/tagged/private.ts': { 'cache-tag': 'video-1', 'cache-control': 'private' },
  };
  const { deployment, shield, edges, endpoint } = await shieldedDeployment(t, (req, res, n) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300', ...tags[req.url!] });
    res.end(`${req.url} #${n}`);
    return true;
  });
  const agents = [shield, ...edges];
  // The edges' probes reach the shield (any agent answers `OPTIONS *`): a latency hint, and available.
  await eventually(async () => (await deployment.must('GET', '/v1/cdn/shield-regions')).data[0].latency_hint_ms !== null, 'the edges measured the shield');
  t.equal(await regionAvailable(deployment), true);
  const own = async (agent: AgentProcess, path: string) => {
    const res = await viewerGet(agent.port, endpoint.hostname, path);
    t.equal(res.status, 200);
    t.same([res.headers['cache-tag'], res.headers['surrogate-key']], [undefined, undefined], `no purge tags reach a viewer (${path})`);
    return res.headers['x-cache-status'];
  };
  for (const path of Object.keys(tags)) for (const edge of edges) await own(edge, path);
  for (const agent of agents) for (const path of ['/tagged/a.ts', '/tagged/b.ts', '/tagged/c.ts']) t.equal(await own(agent, path), 'HIT', `every agent holds ${path}`);

  const purgeTag = async (tag: string) => {
    const purge = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'tag', tags: [tag] });
    await eventually(async () => (await deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', `the purge of ${tag} completed`);
  };
  await purgeTag('video-1');
  // The shield first, so an edge's miss cannot be answered from the shield's old copy.
  t.same(await Promise.all(agents.map((a) => own(a, '/tagged/a.ts'))), ['MISS', 'MISS', 'MISS'], 'a Cache-Tag purge: no agent answers the object from its cache');
  t.same(await Promise.all(agents.map((a) => own(a, '/tagged/c.ts'))), ['HIT', 'HIT', 'HIT'], 'an object without the tag stays');
  await purgeTag('key');
  t.same(await Promise.all(agents.map((a) => own(a, '/tagged/b.ts'))), ['HIT', 'HIT', 'HIT'], 'a tag reaches the edge whole: "key" is not the Surrogate-Key "key,with,commas"');
  await purgeTag('video-2');
  t.same(await Promise.all(agents.map((a) => own(a, '/tagged/b.ts'))), ['MISS', 'MISS', 'MISS'], 'a Surrogate-Key purge reaches every agent too');
});

/** A TCP server that takes connections and reads them, and never writes: a hung shield. Counts the requests it got by their first line. */
async function silentServer(t: { teardown(fn: () => unknown): void }): Promise<{ port: number; requests: (start: string) => number }> {
  const lines: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (d: Buffer) => { for (const line of d.toString('latin1').split('\r\n')) if (/^[A-Z]+ \S+ HTTP\/1\.1$/.test(line)) lines.push(line); });
    socket.on('error', () => {}).on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close(); });
  return { port: (server.address() as net.AddressInfo).port, requests: (start) => lines.filter((l) => l.startsWith(start)).length };
}

if (postgresUrl) await t.test('a shield that takes connections and never answers: the miss goes to the origin within moments, the shield is passed over, and its region reads unavailable', { timeout: 240_000 }, async (t) => {
  const silent = await silentServer(t);
  const fetched: string[] = [];
  // The shield agent runs and heartbeats, but the address it advertises leads to the silent server.
  const { deployment, edges, endpoint } = await shieldedDeployment(t, (req) => { fetched.push(req.url!); }, { address: `http://127.0.0.1:${silent.port}` });
  const first = await viewerGet(edges[0]!.port, endpoint.hostname, '/hung/1.ts');
  t.equal(first.status, 200, 'answered from the origin, long before the origin\'s timeout_ms (30 s) or the viewer\'s (10 s)');
  t.notMatch(String(first.headers['cache-status']), 'edge-shield-r', 'no shield entry');
  t.equal(silent.requests('GET /hung/1.ts'), 1, 'the hop went to the shield once');
  t.ok(silent.requests('OPTIONS *') >= 1, 'which was then asked whether it answers at all');
  const second = await viewerGet(edges[0]!.port, endpoint.hostname, '/hung/2.ts');
  t.equal(second.status, 200);
  t.equal(silent.requests('GET /hung/2.ts'), 0, 'the silent shield is passed over: the next miss goes to the origin at once');
  t.same(fetched.filter((u) => u.startsWith('/hung/')), ['/hung/1.ts', '/hung/2.ts']);
  await eventually(async () => (await regionAvailable(deployment)) === false, 'the region reads unavailable while its shield is silent');
});

if (postgresUrl) await t.test('a shield whose address refuses connections: misses go to the origin and its region reads unavailable', { timeout: 240_000 }, async (t) => {
  const closed = await freePort();
  const { deployment, edges, endpoint } = await shieldedDeployment(t, undefined, { address: `http://127.0.0.1:${closed}` });
  t.equal((await viewerGet(edges[1]!.port, endpoint.hostname, '/refused.ts')).status, 200);
  await eventually(async () => (await regionAvailable(deployment)) === false, 'the region reads unavailable while its shield refuses');
});
