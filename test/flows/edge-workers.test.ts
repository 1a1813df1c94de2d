// An agent on every core (issue 23 item 4), with a real control plane (in this
// process), a real origin and an agent process with WORKERS=2: a purge the
// agent acknowledged is already applied in both workers (no worker serves
// the purged object once the purge reads completed), a prefetch fills both
// workers' caches, a killed worker is replaced while the other keeps serving
// (and /healthz stays ok), /metrics is one view across the workers, and
// SIGTERM drains both.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { cdnCallers, mustCaller } from '../support/cdn.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import { agentHealth, startCountingOrigin, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';

const AGENT_TOKEN = 'agt_edge_workers_flow_test_0123456789';

/** The fill number the counting origin wrote in a body (`/path #n`). */
const fillOf = (body: string) => Number(/#(\d+)$/.exec(body)![1]);

t.test('two workers: purges and prefetches reach both before the ack, a killed worker is replaced while the other serves, one /metrics, SIGTERM drains', { timeout: 180_000 }, async (t) => {
  const cp = await startTestControlPlane(t, { env: { ...RELAXED_LIMITS }, services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) } });
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  const origin = await startCountingOrigin(t);
  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'workers origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'workers', default_origin_id: originRecord.id });
  const published = await must('POST', '/v1/cdn/config/publish', { description: 'workers' });

  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: mkdtempSync(join(tmpdir(), 'sp-workers-')),
    REGION: 'test', NODE_HOSTNAME: 'workers-agent', SHUTDOWN_TIMEOUT_MS: '3000', WORKERS: '2', CACHE_MEMORY_BYTES: '64MiB', CACHE_DISK_BYTES: '0',
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  t.match(agent.logs.join('\n'), /"workers":2/);
  await eventually(async () => (await agentHealth(agent)).config_version === published.version_number, 'the agent applied the configuration');
  // Each GET opens a connection of its own (new source port): the kernel spreads them over the two workers' sockets.
  const get = (path: string) => viewerGet(agent.port, endpoint.hostname, path, { connection: 'close' });
  const both = async (path: string, objects: number) => {
    await eventually(async () => {
      await get(path);
      return (await agentHealth(agent)).cache_objects >= objects;
    }, `both workers cached ${path}`, 60_000);
  };

  await t.test('a purge acknowledged by the agent is applied in both workers', async (t) => {
    await both('/purged', 2);
    const before = Math.max(...(await Promise.all(Array.from({ length: 10 }, () => get('/purged')))).map((r) => fillOf(r.body)));
    const purge = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/purged'] });
    await eventually(async () => (await must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the purge completed (the agent acknowledged it)');
    const after = await Promise.all(Array.from({ length: 30 }, () => get('/purged')));
    t.ok(after.every((r) => r.status === 200));
    t.ok(after.every((r) => fillOf(r.body) > before), `no worker serves the purged object after the ack (fills before: up to #${before}; after: ${[...new Set(after.map((r) => fillOf(r.body)))].join(', ')})`);
  });

  await t.test('a prefetch fills both workers\' caches', async (t) => {
    const job = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/prefetch`, { urls: [`http://${endpoint.hostname}/prefetched`] });
    await eventually(async () => (await must('GET', `/v1/cdn/endpoints/${endpoint.id}/prefetch/${job.id}`)).status === 'completed', 'the prefetch completed');
    const served = await Promise.all(Array.from({ length: 20 }, () => get('/prefetched')));
    t.same(new Set(served.map((r) => r.headers['x-cache-status'])), new Set(['HIT']), 'every connection, whichever worker takes it, is a hit');
  });

  await t.test('a killed worker is replaced; the other keeps serving meanwhile and the agent stays healthy', async (t) => {
    const pids = agent.logs.filter((l) => l.includes('"msg":"worker listening"')).map((l) => Number(/"pid":(\d+)/.exec(l)![1]));
    t.equal(pids.length, 2);
    const listeningBefore = pids.length;
    process.kill(pids[0]!, 'SIGKILL');
    await eventually(() => agent.logs.some((l) => l.includes('a worker exited')), 'the primary noticed');
    const during = await Promise.all(Array.from({ length: 20 }, () => get('/during')));
    t.same(during.map((r) => r.status), Array(20).fill(200), 'the other worker serves every request');
    const health = await agentHealth(agent) as unknown as { status: string; workers: { running: number } };
    t.equal(health.status, 'ok', 'healthy meanwhile');
    await eventually(() => agent.logs.filter((l) => l.includes('"msg":"worker listening"')).length === listeningBefore + 1, 'a new worker listens');
    t.equal(((await agentHealth(agent)) as unknown as { workers: { running: number } }).workers.running, 2);
    const replaced = await Promise.all(Array.from({ length: 20 }, () => get('/purged')));
    t.ok(replaced.every((r) => r.status === 200), 'both serve again');
  });

  await t.test('/metrics is one view across the workers', async (t) => {
    const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    t.match(text, /^edge_workers\{state="running"\} 2$/m);
    t.match(text, new RegExp(`^edge_config_version ${published.version_number}$`, 'm'), 'the version once, not summed');
    const requests = /^edge_requests_total\{endpoint="[^"]+",status_class="2xx"\} (\d+)$/m.exec(text);
    t.ok(requests && Number(requests[1]) >= 60, `requests of every worker counted once each (${requests?.[1]})`);
  });

  await t.test('SIGTERM drains both workers and the primary exits', async (t) => {
    const pids = agent.logs.filter((l) => l.includes('"msg":"worker listening"')).map((l) => Number(/"pid":(\d+)/.exec(l)![1]));
    const exited = new Promise<number | null>((r) => agent.child.once('exit', (code) => r(code)));
    agent.child.kill('SIGTERM');
    t.equal(await exited, 0);
    const alive = pids.filter((pid) => { try { process.kill(pid, 0); return true; } catch { return false; } });
    t.same(alive, [], 'no worker left behind');
  });
});
