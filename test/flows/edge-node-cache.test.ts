// The node tier across a restart (issue 33 item 4), with a real control plane
// (in this process), an origin and an agent process with WORKERS=2 and
// CACHE_DISK_BYTES: the agent is killed, an object is purged while it is
// down, and after the restart the purged object is refetched while one that
// was not purged is a hit with no origin fetch; the purge made while it was
// down reads completed once the restarted agent applied it.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { exitOf, startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { cdnCallers, mustCaller } from '../support/cdn.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import { agentHealth, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import http from 'node:http';

const AGENT_TOKEN = 'agt_edge_node_cache_flow_test_0123456789';

t.test('a restarted agent keeps its node tier: purges made while it was down are applied before it serves, the rest are hits', { timeout: 180_000 }, async (t) => {
  const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS }, services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) } });
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  const fetched = new Map<string, number>();
  const origin = http.createServer((req, res) => {
    const n = (fetched.get(req.url!) ?? 0) + 1;
    fetched.set(req.url!, n);
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=600' });
    res.end(`${req.url} #${n}`);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => { origin.closeAllConnections(); origin.close(() => r()); }));
  const originPort = (origin.address() as { port: number }).port;
  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'node cache origin', scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'node cache', default_origin_id: originRecord.id });
  const published = await must('POST', '/v1/cdn/config/publish', { description: 'node cache' });

  const env = {
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: mkdtempSync(join(tmpdir(), 'sp-node-cache-')),
    REGION: 'test', NODE_HOSTNAME: 'node-cache-agent', SHUTDOWN_TIMEOUT_MS: '3000', WORKERS: '2', CACHE_MEMORY_BYTES: '32MiB', CACHE_DISK_BYTES: '64MiB',
  };
  let agent = await startAgentProcess(env);
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  await eventually(async () => (await agentHealth(agent)).config_version === published.version_number, 'the agent applied the configuration');
  const get = (path: string) => viewerGet(agent.port, endpoint.hostname, path, { connection: 'close' });
  t.equal((await get('/kept.m3u8')).body, '/kept.m3u8 #1');
  t.equal((await get('/purged.m3u8')).body, '/purged.m3u8 #1');
  await eventually(async () => (await agentHealth(agent)).cache_objects === 2, 'both objects are in the node tier');

  agent.child.kill('SIGKILL');
  await exitOf(agent.child);
  const purge = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/purged.m3u8'] });

  agent = await startAgentProcess(env);
  t.match(agent.logs.join('\n'), /the node cache holds objects from before this start/);
  await eventually(async () => (await must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the restarted agent applied the purge made while it was down');
  const purged = await get('/purged.m3u8');
  t.equal(purged.body, '/purged.m3u8 #2', 'the purged object is fetched again');
  t.equal(purged.headers['x-cache-status'], 'MISS');
  const kept = await Promise.all(Array.from({ length: 10 }, () => get('/kept.m3u8')));
  t.same(new Set(kept.map((r) => r.body)), new Set(['/kept.m3u8 #1']), 'the unpurged object is served from before the restart, by both workers');
  t.same(new Set(kept.map((r) => r.headers['x-cache-status'])), new Set(['HIT']));
  t.equal(fetched.get('/kept.m3u8'), 1, 'with no origin fetch');

  // Restarted once more, with the control plane out of reach: the kept objects are not answered from the cache
  // (a purge may have been made meanwhile) until it is back or the agent counts itself cut off.
  agent.child.kill('SIGKILL');
  await exitOf(agent.child);
  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const deadPort = (closed.address() as { port: number }).port;
  await new Promise<void>((r) => closed.close(() => r()));
  agent = await startAgentProcess({ ...env, CONTROL_PLANE_URL: `grpc://127.0.0.1:${deadPort}` });
  const held = await get('/kept.m3u8');
  t.equal(held.headers['x-cache-status'], 'MISS', 'without the control plane\'s word the kept object is not served from the cache');
  t.equal(held.body, '/kept.m3u8 #2');
});
