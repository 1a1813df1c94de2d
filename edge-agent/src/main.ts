// The edge agent process: config from env/flags, the data plane on HTTP_PORT
// and HTTPS_PORT (the default certificate from TLS_CERT_FILE / TLS_KEY_FILE,
// read again on SIGHUP and when the files change), /metrics and /healthz on
// METRICS_PORT, the configuration from --config-file (re-read on SIGHUP) or
// from the control plane (CONTROL_PLANE_URL, the control stream started once
// listening), starting from the last one persisted in DATA_DIR; graceful
// shutdown (draining on the control stream first). With WORKERS > 1 (the
// default on a machine with several cores) this process is the primary and
// the data plane runs in worker processes (workers/primary.ts); with 1 it
// serves viewers itself.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { EdgeAgent } from './agent.ts';
import { openNodeTierAtStart, type ObjectStore } from './cache/index.ts';
import { agentLogger, agentOptions } from './agent-options.ts';
import { ConfigError, loadConfig, type AgentConfig } from './config.ts';
import { ControlClient, readCaFile } from './control/control-client.ts';
import type { ControlledAgent } from './control/controlled-agent.ts';
import { agentVersion, loadOrCreateNodeId } from './control/node-identity.ts';
import { CertificateFiles } from './tls/certificate-files.ts';
import { WorkerPool } from './workers/primary.ts';
import { packagedCountryDatabase } from './policy/geo.ts';

let config: AgentConfig;
try {
  config = loadConfig(process.argv.slice(2), process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`edge-agent: ${err.message}\n`);
    process.exit(1);
  }
  throw err;
}

const logger = agentLogger(config);
const workers = config.WORKERS;
// The node's id (kept in DATA_DIR/node-id): Hello names the node with it, and it signs the shield hops this agent sends.
const identity = config.CONTROL_PLANE_URL ? loadOrCreateNodeId(config.DATA_DIR) : null;
// With workers, this agent serves no viewer: it keeps the configuration's bodies to start new workers from, no cache,
// and no log buffer (its drains are never handed a record: the workers' buffers are the node's).
const options = agentOptions(config, logger);
// The node-wide cache tier (CACHE_DISK_BYTES in DATA_DIR/cache): checked here, then this process's, or its workers'.
// What it kept from before this start is held back until the control plane says which purges were missed.
let nodeTier: ObjectStore | null = null;
let keptObjects = 0;
if (config.CACHE_DISK_BYTES > 0) {
  nodeTier = await openNodeTierAtStart(config.DATA_DIR, config.CACHE_DISK_BYTES, (line) => logger.warn(line));
  keptObjects = nodeTier.count();
  if (workers > 1) {
    await nodeTier.close();
    nodeTier = null;
  }
}
const agent = new EdgeAgent({
  ...options, nodeId: identity?.nodeId, nodeTier,
  ...(workers > 1 ? { keepConfigBodies: true, memoryBytes: 1024 * 1024, logDrains: { ...options.logDrains, bufferBytes: 0 } } : {}),
});
const pool = workers > 1
  ? new WorkerPool({ config, agent, logger, exec: fileURLToPath(new URL('./workers/worker.ts', import.meta.url)), args: process.argv.slice(2) })
  : null;
const controlled: ControlledAgent = pool ?? agent;

/** The default certificate's files, read at start (a failure stops the process) and again when they change or on SIGHUP. */
const certificateFiles = config.TLS_CERT_FILE && config.TLS_KEY_FILE
  ? new CertificateFiles({ cert: config.TLS_CERT_FILE, key: config.TLS_KEY_FILE }, (cert) => (pool ?? agent).setDefaultCertificate(cert), logger)
  : null;
try {
  certificateFiles?.load();
} catch (err) {
  process.stderr.write(`edge-agent: TLS_CERT_FILE: ${(err as Error).message.split('\n')[0]}\n`);
  process.exit(1);
}

async function loadConfigFile(path: string): Promise<void> {
  const raw = JSON.parse(readFileSync(path, 'utf8'));
  if (pool !== null) await pool.applyConfigFile(raw);
  else agent.applyConfig(raw);
}

let caPem: Buffer | undefined;
try {
  caPem = config.CONTROL_PLANE_CA_FILE ? readCaFile(config.CONTROL_PLANE_CA_FILE) : undefined;
} catch (err) {
  process.stderr.write(`edge-agent: CONTROL_PLANE_CA_FILE: ${(err as Error).message}\n`);
  process.exit(1);
}

const restored = agent.restore();
if (config.CONTROL_PLANE_URL) agent.holdCacheUntilWelcome(keptObjects);
if (config.CONFIG_FILE) {
  try {
    await loadConfigFile(config.CONFIG_FILE);
  } catch (err) {
    process.stderr.write(`edge-agent: CONFIG_FILE: ${(err as Error).message.split('\n')[0]}\n`);
    process.exit(1);
  }
} else if (restored) {
  logger.info({ version: restored }, 'serving the configuration persisted in DATA_DIR');
}

// The viewers' country table, loaded before the first viewer: its load (about half a second) on the first request's
// record held up that request's answer and every request behind it.
if (pool === null) packagedCountryDatabase();

try {
  let ports: { http: number; https: number | null };
  let metrics;
  if (pool !== null) {
    ports = await pool.start();
    metrics = await agent.listenMetrics(config.METRICS_PORT, config.METRICS_HOST, { metrics: () => pool.metricsText(), health: () => pool.healthView() });
  } else {
    const http = await agent.listen(config.HTTP_PORT, config.HOST);
    const https = config.HTTPS_PORT === 'off' ? null : await agent.listenHttps(config.HTTPS_PORT, config.HOST);
    ports = { http: http.port, https: https?.port ?? null };
    metrics = await agent.listenMetrics(config.METRICS_PORT, config.METRICS_HOST);
  }
  logger.info({
    http_port: ports.http, https_port: ports.https, metrics_port: metrics.port, workers, config_version: agent.configVersion,
    control_plane: config.CONTROL_PLANE_URL ?? null,
  }, 'edge agent listening');
} catch (err) {
  process.stderr.write(`edge-agent: cannot listen: ${(err as Error).message}\n`);
  process.exit(1);
}

let control: ControlClient | null = null;
if (config.CONTROL_PLANE_URL) {
  // Until the control plane answers (and whenever it cannot be reached), the configuration persisted in DATA_DIR serves.
  if (identity!.created) logger.info({ node_id: identity!.nodeId }, 'new node id kept in DATA_DIR/node-id');
  control = new ControlClient({
    url: config.CONTROL_PLANE_URL,
    token: config.AGENT_TOKEN!,
    caPem,
    agent: controlled,
    nodeId: identity!.nodeId,
    hostname: config.NODE_HOSTNAME ?? hostname(),
    region: config.REGION,
    agentVersion: agentVersion(),
    shield: { address: config.SHIELD_ADDRESS, regionName: config.REGION_NAME, regionCountryCode: config.REGION_COUNTRY, regionCity: config.REGION_CITY },
    logger,
  });
  control.start();
}

process.on('SIGHUP', () => {
  certificateFiles?.reload();
  if (!config.CONFIG_FILE) return;
  loadConfigFile(config.CONFIG_FILE).catch((err: Error) => {
    logger.error({ err: err.message }, 'reloading the config file failed; the previous configuration keeps serving');
  });
});

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    // Draining: the control plane hears it at once; viewers' requests in flight finish; then the stream ends cleanly.
    control?.drain();
    (pool ?? agent).close(config.SHUTDOWN_TIMEOUT_MS).then(
      () => control?.close(),
    ).then(
      () => process.exit(0),
      (err: Error) => {
        logger.error({ err: err.message }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
