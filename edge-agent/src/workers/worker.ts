// A data-plane worker of an agent with WORKERS > 1 (forked by workers/primary.ts
// through node:cluster, with the agent's own flags and environment): one
// EdgeAgent serving viewers on the agent's ports (each worker its own socket,
// SO_REUSEPORT), with its own memory tier (CACHE_MEMORY_BYTES divided by
// WORKERS) in front of the node tier every worker shares (DATA_DIR/cache,
// opened as the primary prepared it; fills of a key take turns through the
// primary's fill locks), its log drains, and no control stream, persistence or origin probes: the
// primary holds those and tells it every configuration (prepared, then
// committed once every worker prepared it), purge and prefetch, which it
// answers once done. It listens only after it has the configuration in force.
// Signals are the primary's to act on: a worker stops when told to drain, or
// when its primary is gone.
import cluster from 'node:cluster';
import { join } from 'node:path';
import { EdgeAgent, type PreparedConfig } from '../agent.ts';
import { agentLogger, agentOptions } from '../agent-options.ts';
import { openNodeTier } from '../cache/index.ts';
import { loadConfig } from '../config.ts';
import { DefaultCertificate } from '../tls/certificates.ts';
import { useChallengeSecret } from '../policy/challenge.ts';
import { FillLockClient } from './fill-locks.ts';
import { packagedCountryDatabase } from '../policy/geo.ts';
import type { FromWorker, ToWorker } from './protocol.ts';

if (!cluster.isWorker) throw new Error('workers/worker.ts runs as a worker of the agent\'s primary process');

const index = Number(process.env.EDGE_WORKER_INDEX ?? '0');
const config = loadConfig(process.argv.slice(2), process.env);
const logger = agentLogger(config, { worker: index });
const base = agentOptions(config, logger);
// With a node tier, a fill one worker runs is awaited by the others (one origin fetch per object for the node).
const fillLock = config.CACHE_DISK_BYTES > 0 ? new FillLockClient(send) : null;
const agent = new EdgeAgent({
  ...base,
  dataDir: join(config.DATA_DIR, 'workers', String(index)),
  memoryBytes: Math.floor(config.CACHE_MEMORY_BYTES / config.WORKERS),
  // The node tier is one for all workers (the primary checked it before starting them).
  nodeTier: config.CACHE_DISK_BYTES > 0 ? await openNodeTier(config.DATA_DIR, config.CACHE_DISK_BYTES) : null,
  fillLock,
  // The node tier's objects and bytes are reported by worker 0 alone (each worker would count them again).
  reportsNodeTier: index === 0,
  persist: false,
  stateKey: null,
  healthProbes: false,
  nodeId: process.env.EDGE_NODE_ID,
});

function ignoreSendError(): void {}

const STATS_EVERY_MS = 1_000;
/** Traffic is sent every fifth stats message, with every URL the window holds (the primary cuts the top list). */
const TRAFFIC_EVERY = 5;
const ALL_URLS = 1_000_000;

/** False when the primary cannot be reached. */
function send(msg: FromWorker): boolean {
  if (!process.connected) return false;
  // With a callback a send to a primary that just died fails there, not as an 'error' that kills the worker mid-write.
  process.send!(msg, undefined, {}, ignoreSendError);
  return true;
}

const reply = (id: number, value: unknown = null): void => void send({ t: 'reply', id, ok: true, value });
const fail = (id: number, err: unknown): void => void send({ t: 'reply', id, ok: false, error: (err as Error).message ?? String(err) });

/** The push prepared last (the primary runs one operation at a time: a commit or abort is for it). */
let prepared: PreparedConfig | null = null;
let statsTimer: NodeJS.Timeout | null = null;
let stopping = false;

async function handle(msg: ToWorker): Promise<void> {
  switch (msg.t) {
    case 'init': {
      useChallengeSecret(msg.challengeSecret);
      if (msg.push !== null) agent.applyConfigPush(msg.push);
      agent.adoptPurgeState(msg.purge);
      agent.applyShieldMap(msg.shield);
      agent.setDefaultCertificate(msg.certificate === null ? null : new DefaultCertificate(msg.certificate));
      packagedCountryDatabase(); // before the first viewer (main.ts)
      const http = await agent.listen(msg.ports.http, config.HOST, { shared: true });
      const https = msg.ports.https === null ? null : await agent.listenHttps(msg.ports.https, config.HOST, { shared: true, ticketKeys: msg.ticketKeys });
      await agent.listenPrivate();
      startStats();
      return reply(msg.id, { http: http.port, https: https?.port ?? null });
    }
    case 'prepare':
      prepared = null;
      prepared = agent.prepareConfigPush(msg.push);
      return reply(msg.id);
    case 'commit': {
      if (prepared === null) throw new Error('nothing prepared to commit');
      const result = agent.commitConfigPush(prepared);
      prepared = null;
      return reply(msg.id, result);
    }
    case 'abort':
      prepared = null;
      return;
    case 'purge':
      return reply(msg.id, await agent.applyPurge(msg.cmd));
    case 'prefetch':
      return reply(msg.id, await agent.prefetch(msg.endpointId, msg.urls));
    case 'metrics':
      return reply(msg.id, await agent.metrics.registry.getMetricsAsJSON());
    case 'startFromPurge':
      return agent.startFromPurge(msg.sequence, msg.reset);
    case 'fillTurn':
      return fillLock?.turn(msg.ticket, msg.key, msg.lead);
    case 'catchUp':
      return void agent.beginPurgeCatchUp(msg.target);
    case 'skipPurge':
      return agent.skipPurge(msg.sequence, msg.reason);
    case 'cutOff':
      return agent.controlPlaneLost(msg.lost);
    case 'shield':
      return agent.applyShieldMap(msg.map);
    case 'certificate':
      return agent.setDefaultCertificate(msg.certificate === null ? null : new DefaultCertificate(msg.certificate));
    case 'ticketKeys':
      return agent.setTicketKeys(msg.keys);
    case 'drain':
      return stop(msg.timeoutMs);
  }
}

function startStats(): void {
  let tick = 0;
  statsTimer = setInterval(() => {
    const h = agent.healthReport();
    tick++;
    const store = agent.store;
    send({
      t: 'stats', cacheObjects: store.memory.size, cacheBytes: store.memoryBytes, nodeObjects: store.hasNodeTier ? store.objectCount : 0, nodeBytes: store.diskBytes,
      drains: h.logDrains ?? [], rollups: tick % TRAFFIC_EVERY === 0 ? agent.takeTrafficRollups(ALL_URLS) : [],
    });
  }, STATS_EVERY_MS);
  statsTimer.unref();
}

async function stop(timeoutMs: number, code = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  if (statsTimer !== null) clearInterval(statsTimer);
  try {
    await agent.close(timeoutMs);
  } catch (err) {
    logger.error({ err: (err as Error).message }, 'worker shutdown failed');
  }
  // What it counted since the last report goes to the primary before it exits.
  const last: FromWorker = { t: 'stats', cacheObjects: 0, cacheBytes: 0, nodeObjects: 0, nodeBytes: 0, drains: agent.logs.states(), rollups: agent.takeTrafficRollups(ALL_URLS) };
  if (process.connected) process.send!(last, undefined, {}, () => process.exit(code));
  else process.exit(code);
}

process.on('message', (msg: ToWorker) => {
  const id = 'id' in msg ? msg.id : -1;
  handle(msg).catch((err: unknown) => {
    if (id >= 0) fail(id, err);
    else logger.error({ err: (err as Error).message, message: msg.t }, 'worker could not apply a message');
  });
});
// Signals reach the whole process group (Ctrl-C): the primary decides, and tells the workers to drain.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => {});
// The primary is gone (killed): stop serving, since nothing keeps this worker's cache in step any more.
// node:cluster's own listener exits at once, which with node-tier writes under way (LMDB's write thread
// waiting on this thread) hangs or crashes the exit: it is replaced by a stop that lets them finish first.
process.removeAllListeners('disconnect');
process.on('disconnect', () => {
  fillLock?.abandon();
  void stop(1_000);
});
// A crash takes the same way out (the primary starts a new worker), for the same reason.
process.on('uncaughtException', (err) => {
  logger.fatal({ err: err.message, stack: err.stack }, 'worker crashed');
  void stop(1_000, 1);
});
