// Fault scenarios of issue 26 item 5, run by the fault tests
// (test/system/faults-*.test.ts, which assert the checks and print the
// figures) and by `npm run bench:faults` (which appends the figures to
// bench/results/faults.md). Each starts real processes on loopback (a
// control plane, agents, an origin), keeps traffic flowing, makes one fault
// and reports what was served during it, what failed, how long recovery took
// and whether every acknowledged write survived.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import {
  agentHealth, startDeployment, startEdgeAgent, viewerGet, type AgentProcess, type Deployment,
} from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { startPrivatePostgres, startPrivateRedis } from '../support/private-services.ts';
import { startControlPlaneProcess } from '../support/processes.ts';
import { publishAndWait, versionedOrigin } from '../support/system.ts';
import { startTcpBalancer } from '../support/tcp-balancer.ts';
import { startTraffic } from '../support/traffic.ts';

export interface Teardown { teardown(fn: () => unknown): void }

export interface FaultReport {
  scenario: string;
  /** Figures to record (requests served during the fault, errors, recovery time...). */
  figures: Record<string, string | number>;
  /** What must hold; a test asserts each. */
  checks: { what: string; ok: boolean; detail?: string }[];
}

const seconds = (ms: number) => Number((ms / 1000).toFixed(2));
const summary = (c: { served: number; failed: number; statuses: Record<string, number> }) =>
  `${c.served} served, ${c.failed} failed${c.failed ? ` (${Object.entries(c.statuses).filter(([s]) => Number(s) === 0 || Number(s) >= 400).map(([s, n]) => `${s === '0' ? 'no answer' : s}: ${n}`).join(', ')})` : ''}`;

/** Whether a process is still running (a crash would have ended it). */
const alive = (child: { exitCode: number | null; signalCode: NodeJS.Signals | null }) => child.exitCode === null && child.signalCode === null;

/** Viewers' requests through the agents (a handful of hot objects: mostly hits, a miss now and then as new paths come). */
function viewerStream(agents: AgentProcess[], host: string, name = 'viewers') {
  return {
    name, concurrency: 2,
    send: async (n: number) => (await viewerGet(agents[n % agents.length]!.port, host, `/media/${n % 20}.ts`)).status,
  };
}

// ---------------------------------------------------------------------------

/**
 * PostgreSQL, then Redis, restarted under traffic (private servers of the scenario's own). Viewers keep being
 * served by the agent; the control plane answers what it can (reads and writes fail cleanly while PostgreSQL
 * is down) and recovers without a restart; every write it acknowledged is readable afterwards, and a publish
 * and a purge made after both restarts reach the agent.
 */
export async function databaseRestarts(t: Teardown, options: { downMs?: number } = {}): Promise<FaultReport> {
  const downMs = options.downMs ?? 2000;
  const [pg, redis] = await Promise.all([startPrivatePostgres(t), startPrivateRedis(t)]);
  const database = await createTestDatabase({ postgresUrl: pg.url, template: null });
  await database.db.close();
  t.teardown(() => database.dispose());
  const origin = await versionedOrigin(t);
  const deployment = await startDeployment(t, { postgresUrl: pg.url, database: database as TestDatabase, env: { REDIS_URL: redis.url } });
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-db-faults');
  const o = await deployment.must('POST', '/v1/cdn/origins', { name: 'media', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await deployment.must('POST', '/v1/cdn/endpoints', { name: 'media', default_origin_id: o.id });
  await publishAndWait(deployment, 'media', 1);

  const acknowledged: string[] = [];
  const traffic = startTraffic([
    viewerStream([agent], endpoint.hostname),
    { name: 'api reads', concurrency: 1, send: async () => (await deployment.api('GET', '/v1/cdn/endpoints?limit=5')).status },
    {
      name: 'api writes', concurrency: 1, pauseMs: 20,
      send: async (n) => {
        const res = await deployment.api('POST', '/v1/cdn/origins', { name: `written ${n}`, host: '93.184.216.34' });
        if (res.status === 201) acknowledged.push(res.body.id);
        return res.status;
      },
    },
  ]);
  await sleep(1500);
  const figures: FaultReport['figures'] = {};
  const checks: FaultReport['checks'] = [];
  for (const [name, server] of [['PostgreSQL', pg], ['Redis', redis]] as const) {
    const from = Date.now();
    await server.stop();
    await sleep(downMs);
    await server.start();
    const back = Date.now();
    // Recovered: a write acknowledged after the server is back (bounded).
    await eventually(() => traffic.firstServedAfter('api writes', back) !== undefined, `the control plane writes again after the ${name} restart`, 30_000);
    const recovered = traffic.firstServedAfter('api writes', back)!;
    await sleep(500);
    const viewers = traffic.count('viewers', from, recovered);
    const reads = traffic.count('api reads', from, recovered);
    const writes = traffic.count('api writes', from, recovered);
    figures[`${name}: down for (s)`] = seconds(back - from);
    figures[`${name}: viewers during the fault`] = summary(viewers);
    figures[`${name}: API reads during the fault`] = summary(reads);
    figures[`${name}: API writes during the fault`] = summary(writes);
    figures[`${name}: recovery, back up to first acknowledged write (s)`] = seconds(recovered - back);
    checks.push({ what: `${name}: the agent kept serving viewers (no failed viewer request)`, ok: viewers.failed === 0 && viewers.served > 0, detail: summary(viewers) });
    const fiveHundreds = [...Object.entries(reads.statuses), ...Object.entries(writes.statuses)].filter(([s]) => Number(s) >= 500 && Number(s) !== 503);
    checks.push({ what: `${name}: the API failed only with 503 while it was down (no other 5xx, always an answer)`, ok: fiveHundreds.length === 0 && !reads.statuses['0'] && !writes.statuses['0'], detail: `${summary(reads)}; ${summary(writes)}` });
    checks.push({ what: `${name}: the control plane process is the same one, still running`, ok: alive(deployment.process.child) });
  }
  await traffic.stop();
  const all = traffic.count('api writes');
  figures['writes acknowledged (2xx) in all'] = acknowledged.length;
  let lost = 0;
  for (const id of acknowledged) if ((await deployment.api('GET', `/v1/cdn/origins/${id}`)).status !== 200) lost++;
  figures['acknowledged writes lost'] = lost;
  figures['writes refused or failed in all'] = all.failed;
  checks.push({ what: 'no acknowledged write lost: every origin created with a 2xx reads back', ok: lost === 0 && acknowledged.length > 0, detail: `${lost} of ${acknowledged.length}` });

  // Still whole: a configuration change and a purge reach the agent.
  origin.bump();
  await deployment.must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: 'media after the restarts' });
  const version = await publishAndWait(deployment, 'after the restarts', 1);
  const purge = await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: ['/media/1.ts'] });
  await eventually(async () => (await deployment.must('GET', `/v1/cdn/purge/${purge.id}`)).status === 'completed', 'the purge after the restarts completed');
  const health = await agentHealth(agent);
  checks.push({ what: 'after both restarts a publish and a purge reach the agent', ok: health.config_version >= version.version_number && (await viewerGet(agent.port, endpoint.hostname, '/media/1.ts')).body === '/media/1.ts v2' });
  figures['viewer requests in all'] = summary(traffic.count('viewers'));
  return { scenario: 'PostgreSQL and Redis restarted during traffic', figures, checks };
}

// ---------------------------------------------------------------------------

/**
 * An agent with a disk cache SIGKILLed in the middle of a run of purges (one per object, sent one after the
 * other: it has applied the first when it dies, not the rest), then started again on its data directory (its
 * configuration, sealed on disk, lets it serve before the control plane answers): viewers asking it from its
 * first second never get a purged copy, nothing cached before the kill is served, the missed purges stored
 * while it was connected do not read completed while it is down (those stored after its stream ended do not
 * aim at it), and it applies them all once back.
 */
export async function agentKilledMidPurge(t: Teardown, postgresUrl: string, redisUrl?: string): Promise<FaultReport> {
  const origin = await versionedOrigin(t);
  const deployment = await startDeployment(t, { postgresUrl, env: { ...(redisUrl ? { REDIS_URL: redisUrl } : {}), EDGE_PURGE_TIMEOUT_MS: '60000' } });
  const dataDir = mkdtempSync(join(tmpdir(), 'sp-agent-killed-'));
  // Registered before the processes that write there: teardowns run last registered first, so it runs once they are gone.
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const diskEnv = { DATA_DIR: dataDir, CACHE_DISK_BYTES: String(64 * 1024 * 1024) };
  const steady = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-steady');
  let victim = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-victim', diskEnv);
  const o = await deployment.must('POST', '/v1/cdn/origins', { name: 'media', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await deployment.must('POST', '/v1/cdn/endpoints', { name: 'media', default_origin_id: o.id });
  await deployment.must('POST', `/v1/cdn/distributions/${endpoint.id}/cache-rules`, { name: 'everything', match: { paths: ['/*'] }, ttl_seconds: 3600 });
  await publishAndWait(deployment, 'media', 2);
  const paths = Array.from({ length: 40 }, (_, i) => `/media/${i}.ts`);
  for (const agent of [steady, victim]) for (const p of [...paths, '/kept.ts']) await viewerGet(agent.port, endpoint.hostname, p);
  const hits = await Promise.all(paths.map((p) => viewerGet(victim.port, endpoint.hostname, p)));
  const checks: FaultReport['checks'] = [];
  checks.push({ what: 'the victim had every object cached before', ok: hits.every((h) => h.headers['x-cache-status'] === 'HIT') });

  // The content changes and each object is purged in turn; the victim dies once it has applied the first purge.
  origin.bump();
  const purges: { id: string; sequence: number }[] = [];
  const sending = (async () => {
    for (const p of paths) purges.push(await deployment.must('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: [p] }));
  })();
  let appliedAtKill = 0;
  await eventually(async () => {
    if (!purges.length) return false;
    appliedAtKill = (await agentHealth(victim)).purge_sequence;
    return appliedAtKill >= purges[0]!.sequence;
  }, 'the victim applied the first purge', 30_000);
  victim.child.kill('SIGKILL');
  const killedAt = Date.now();
  await new Promise<void>((resolve) => (victim.child.exitCode !== null || victim.child.signalCode !== null ? resolve() : victim.child.once('exit', () => resolve())));
  await sending;
  const last = purges.at(-1)!;
  const missed = purges.filter((p) => p.sequence > appliedAtKill).length;
  // A purge stored while the victim was connected waits for it; one stored after its stream ended does not aim at it.
  const missedRecords = await Promise.all(purges.filter((p) => p.sequence > appliedAtKill).map((p) => deployment.must('GET', `/v1/cdn/purge/${p.id}`)));
  const aimedAtVictim = missedRecords.filter((r) => r.edge_nodes_total === 2);
  const completedWithoutIt = aimedAtVictim.filter((r) => r.status === 'completed').length;

  victim = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-victim', diskEnv);
  const startedAt = Date.now();
  const keptFirst = await viewerGet(victim.port, endpoint.hostname, '/kept.ts');
  // From its first second, viewers ask for the purged objects: none may get the old copy.
  let stale = 0;
  let served = 0;
  let failed = 0;
  let caughtUpAt = 0;
  const deadline = Date.now() + 45_000;
  for (let round = 0; Date.now() < deadline; round++) {
    const replies = await Promise.all(paths.slice((round % 4) * 10, (round % 4) * 10 + 10).map((p) => viewerGet(victim.port, endpoint.hostname, p).catch(() => null)));
    for (const r of replies) {
      if (!r || r.status >= 500) failed++;
      else if (r.body.endsWith(' v1')) stale++;
      else served++;
    }
    if (!caughtUpAt && (await agentHealth(victim)).purge_sequence >= last.sequence) caughtUpAt = Date.now();
    if (caughtUpAt && Date.now() - caughtUpAt > 300) break;
  }
  let incomplete = 0;
  await eventually(async () => {
    incomplete = 0;
    for (const p of purges) if ((await deployment.must('GET', `/v1/cdn/purge/${p.id}`)).status !== 'completed') incomplete++;
    return incomplete === 0;
  }, 'every purge completed once the victim was back', 45_000).catch(() => {});
  const after = await Promise.all(paths.map((p) => viewerGet(victim.port, endpoint.hostname, p)));
  checks.push({ what: 'killed mid-run: it had applied some of the purges and missed others', ok: missed > 0 && missed < purges.length, detail: `${purges.length - missed} applied, ${missed} missed` });
  checks.push({ what: 'no purge aimed at the victim (stored while it was connected) read completed while it was down', ok: completedWithoutIt === 0, detail: `${aimedAtVictim.length} of the ${missed} it missed aimed at it, ${completedWithoutIt} completed` });
  checks.push({ what: 'back, the victim never served a purged copy (not even before it had caught up)', ok: stale === 0 && served > 0, detail: `${stale} stale, ${served} fresh` });
  checks.push({ what: 'it applied the purges it missed, and every purge completed on both nodes', ok: caughtUpAt > 0 && incomplete === 0, detail: `${incomplete} of ${purges.length} not completed` });
  checks.push({ what: 'every purged object is the new content afterwards', ok: after.every((r) => r.body.endsWith(' v2')) });
  // The disk tier is wiped on start (cache-store.ts): nothing cached before the kill is trusted, purged or not.
  checks.push({ what: 'nothing cached before the kill is served: an object not purged is fetched from the origin again', ok: keptFirst.headers['x-cache-status'] !== 'HIT' && origin.asked('/kept.ts') === 3, detail: `${keptFirst.headers['x-cache-status']}, origin asked ${origin.asked('/kept.ts')} times` });
  return {
    scenario: 'An agent killed mid-purge',
    figures: {
      'purges sent (one per object)': purges.length,
      'applied by the victim before the kill / missed': `${purges.length - missed} / ${missed}`,
      'missed purges stored while it was still connected (they wait for it)': aimedAtVictim.length,
      'down (kill to restarted agent listening) (s)': seconds(startedAt - killedAt),
      'catch-up (listening to the last purge applied) (s)': caughtUpAt ? seconds(caughtUpAt - startedAt) : 'never',
      'viewer requests to the victim from its restart to 0.3 s after catch-up': `${served} fresh, ${stale} stale, ${failed} failed`,
    },
    checks,
  };
}

// ---------------------------------------------------------------------------

/**
 * Two control-plane replicas on one PostgreSQL and one Redis behind a TCP balancer (everything lands on the
 * first while it is up); three agents connect through it. Purges keep being sent through the second
 * replica's API while the first is SIGKILLed: the agents move to the second and every purge acknowledged
 * (202) completes on all of them, viewers served meanwhile.
 */
export async function replicaKilled(t: Teardown, postgresUrl: string, redisUrl: string): Promise<FaultReport> {
  const origin = await versionedOrigin(t);
  const dataDir = mkdtempSync(join(tmpdir(), 'sp-replicas-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true })); // after the processes (last registered, first run)
  const shared = { REDIS_URL: redisUrl, SECRETS_KEY: randomBytes(32).toString('hex'), EDGE_PURGE_TIMEOUT_MS: '60000' };
  const a: Deployment = await startDeployment(t, { postgresUrl, env: { ...shared, DATA_DIR: join(dataDir, 'a') } });
  const b = await startControlPlaneProcess(t, {
    DATABASE_URL: a.database.url, NODE_ENV: 'development', LOG_LEVEL: 'info', PUBLIC_URL: '', GRPC_PORT: '0', CDN_PUBLISH_MODE: 'manual',
    EDGE_HEARTBEAT_INTERVAL_MS: '500', JOBS_WORKER: 'true', RATE_LIMIT_PER_MINUTE: '0', DATA_DIR: join(dataDir, 'b'), ...shared,
  });
  const bGrpc = Number((await b.waitForLine(/"port":(\d+).*edge control channel listening/))[1]);
  const balancer = await startTcpBalancer([{ host: '127.0.0.1', port: a.grpcPort }, { host: '127.0.0.1', port: bGrpc }]);
  t.teardown(() => balancer.close());
  const agents = await Promise.all(['edge-1', 'edge-2', 'edge-3'].map((name) => startEdgeAgent(t, a, balancer.port, name)));
  // B's API, as the superadmin logged in on A (the replicas share the signing keys).
  const bApi = async (method: string, path: string, json?: unknown) => {
    const res = await fetch(`${b.url}${path}`, {
      method, headers: { authorization: `Bearer ${a.accessToken}`, ...(json === undefined ? {} : { 'content-type': 'application/json' }) },
      body: json === undefined ? undefined : JSON.stringify(json), signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
  const o = await a.must('POST', '/v1/cdn/origins', { name: 'media', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await a.must('POST', '/v1/cdn/endpoints', { name: 'media', default_origin_id: o.id });
  await a.must('POST', `/v1/cdn/distributions/${endpoint.id}/cache-rules`, { name: 'everything', match: { paths: ['/*'] }, ttl_seconds: 3600 });
  await publishAndWait(a, 'media', 3);
  const checks: FaultReport['checks'] = [];
  checks.push({ what: 'every agent connected to the first replica', ok: balancer.connections.get(a.grpcPort) === 3 && !balancer.connections.get(bGrpc) });

  const purges: { id: string; sequence: number; at: number }[] = [];
  const traffic = startTraffic([
    viewerStream(agents, endpoint.hostname),
    {
      name: 'purges', concurrency: 1, pauseMs: 100,
      send: async (n) => {
        const res = await bApi('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: [`/media/${n % 20}.ts`] });
        if (res.status >= 200 && res.status < 300) purges.push({ id: res.body.id, sequence: res.body.sequence, at: Date.now() });
        return res.status;
      },
    },
  ]);
  await sleep(1500);
  const killedAt = Date.now();
  a.process.child.kill('SIGKILL');
  await a.process.exited;
  await eventually(() => (balancer.connections.get(bGrpc) ?? 0) >= 3, 'the three agents reconnected through the balancer to the second replica', 45_000);
  const movedAt = Date.now();
  await sleep(2000);
  const stoppedAt = Date.now();
  await traffic.stop();
  const last = Math.max(0, ...purges.map((p) => p.sequence));
  await eventually(async () => (await Promise.all(agents.map(agentHealth))).every((h) => h.purge_sequence >= last), 'every agent applied the last purge', 45_000);
  const caughtUpAt = Date.now();
  let incomplete = 0;
  for (const p of purges) {
    const read = await bApi('GET', `/v1/cdn/purge/${p.id}`);
    if (read.body?.status !== 'completed') incomplete++;
  }
  const viewers = traffic.count('viewers', killedAt, stoppedAt);
  const sent = traffic.count('purges', killedAt, stoppedAt);
  checks.push({ what: 'the agents moved to the second replica', ok: (balancer.connections.get(bGrpc) ?? 0) >= 3 });
  checks.push({ what: 'no purge lost: every acknowledged purge applied by every agent and read completed', ok: incomplete === 0 && purges.length > 0, detail: `${incomplete} of ${purges.length} not completed` });
  checks.push({ what: 'viewers were served while the agents moved and after (no failed viewer request)', ok: viewers.failed === 0 && viewers.served > 0, detail: summary(viewers) });
  checks.push({ what: 'the second replica answered every purge request while the first died (no 5xx)', ok: !Object.keys(sent.statuses).some((s) => Number(s) >= 500 || s === '0'), detail: summary(sent) });
  return {
    scenario: 'A control-plane replica killed with agents on it',
    figures: {
      'move (kill to three agents connected to the other replica) (s)': seconds(movedAt - killedAt),
      'last purge acknowledged to applied on every agent (s)': seconds(caughtUpAt - Math.max(...purges.map((p) => p.at))),
      'purges acknowledged in all': purges.length,
      'purges sent from the kill to 2 s after the move': summary(sent),
      'purges lost': incomplete,
      'viewer requests from the kill to 2 s after the move': summary(viewers),
    },
    checks,
  };
}
