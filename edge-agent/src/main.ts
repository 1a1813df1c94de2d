// The edge agent process: config from env/flags, the data plane on HTTP_PORT
// and HTTPS_PORT (the default certificate from TLS_CERT_FILE / TLS_KEY_FILE,
// read again on SIGHUP and when the files change),
// /metrics and /healthz on METRICS_PORT, the configuration from --config-file
// (re-read on SIGHUP) or from the control plane (CONTROL_PLANE_URL, the control
// stream started once listening), starting from the last one persisted in
// DATA_DIR; graceful shutdown (draining on the control stream first).
import { readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import pino from 'pino';
import { EdgeAgent } from './agent.ts';
import { ConfigError, loadConfig, type AgentConfig } from './config.ts';
import { ControlClient, readCaFile } from './control/control-client.ts';
import { agentVersion, loadOrCreateNodeId } from './control/node-identity.ts';
import { StateKey } from './control/sealing.ts';
import { trustedProxy } from './policy/client-address.ts';
import { readCertificateFiles } from './tls/certificates.ts';

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

const logger = pino({
  level: config.LOG_LEVEL,
  base: { service: 'edge-agent', region: config.REGION },
  // Secrets never reach the logs, whatever a caller passes.
  redact: ['token', 'agent_token', 'authorization', '*.authorization', 'headers.authorization', 'headers.cookie'],
});

const agent = new EdgeAgent({
  dataDir: config.DATA_DIR,
  // The configuration kept in DATA_DIR is sealed with a key derived from the agent token, which is not stored beside it.
  // From a config file nothing is kept (the file is read at every start).
  persist: config.AGENT_TOKEN !== undefined,
  stateKey: config.AGENT_TOKEN === undefined ? null : StateKey.fromAgentToken(config.AGENT_TOKEN),
  memoryBytes: config.CACHE_MEMORY_BYTES,
  diskBytes: config.CACHE_DISK_BYTES,
  maxObjectBytes: config.CACHE_MAX_OBJECT_BYTES,
  region: config.REGION,
  defaultEndpointId: config.DEFAULT_ENDPOINT ?? null,
  logger,
  requestHeadersTimeoutMs: config.REQUEST_HEADERS_TIMEOUT_MS,
  requestTimeoutMs: config.REQUEST_TIMEOUT_MS,
  requestBodyIdleTimeoutMs: config.REQUEST_BODY_IDLE_TIMEOUT_MS,
  uploadConnectionsPerOrigin: config.ORIGIN_UPLOAD_CONNECTIONS,
  maxEndpoints: config.MAX_ENDPOINTS,
  trustedProxy: trustedProxy(config.TRUST_PROXY_HEADER, config.TRUSTED_PROXY_CIDRS),
  cacheWhenDisconnected: config.CACHE_WHEN_DISCONNECTED,
  nodeName: config.NODE_HOSTNAME ?? hostname(),
  logDrains: { bufferBytes: config.LOG_DRAIN_BUFFER_BYTES, flushIntervalMs: config.LOG_DRAIN_FLUSH_INTERVAL_MS, retryMaxMs: config.LOG_DRAIN_RETRY_MAX_MS },
  httpsPublicPort: config.HTTPS_PUBLIC_PORT,
});

/** The default certificate's files, read at start (a failure stops the process) and again when they change. */
const certificateFiles = config.TLS_CERT_FILE && config.TLS_KEY_FILE ? { cert: config.TLS_CERT_FILE, key: config.TLS_KEY_FILE } : null;
let certificateStamp = '';
const stampOf = (files: { cert: string; key: string }) => [files.cert, files.key].map((f) => { try { const st = statSync(f); return `${st.mtimeMs}:${st.size}`; } catch { return '-'; } }).join('|');
function loadDefaultCertificate(): void {
  if (certificateFiles === null) return;
  const stamp = stampOf(certificateFiles);
  const cert = readCertificateFiles(certificateFiles.cert, certificateFiles.key, (f) => readFileSync(f, 'utf8'));
  certificateStamp = stamp;
  agent.setDefaultCertificate(cert);
  logger.info({ fingerprint: cert.fingerprint, subject_alt_names: cert.x509.subjectAltName ?? null, valid_to: cert.x509.validTo }, 'default certificate loaded');
}
function reloadDefaultCertificate(): void {
  try {
    loadDefaultCertificate();
  } catch (err) {
    logger.error({ err: (err as Error).message }, 'reading the default certificate failed; the previous one keeps serving');
  }
}
try {
  loadDefaultCertificate();
} catch (err) {
  process.stderr.write(`edge-agent: TLS_CERT_FILE: ${(err as Error).message.split('\n')[0]}\n`);
  process.exit(1);
}
if (certificateFiles !== null) {
  // Renewal tools replace the files: a change is noticed within 30 s (or at once on SIGHUP).
  setInterval(() => { if (stampOf(certificateFiles) !== certificateStamp) reloadDefaultCertificate(); }, 30_000).unref();
}

function loadConfigFile(path: string): void {
  const raw = JSON.parse(readFileSync(path, 'utf8'));
  agent.applyConfig(raw);
}

let caPem: Buffer | undefined;
try {
  caPem = config.CONTROL_PLANE_CA_FILE ? readCaFile(config.CONTROL_PLANE_CA_FILE) : undefined;
} catch (err) {
  process.stderr.write(`edge-agent: CONTROL_PLANE_CA_FILE: ${(err as Error).message}\n`);
  process.exit(1);
}

const restored = agent.restore();
if (config.CONFIG_FILE) {
  try {
    loadConfigFile(config.CONFIG_FILE);
  } catch (err) {
    process.stderr.write(`edge-agent: CONFIG_FILE: ${(err as Error).message.split('\n')[0]}\n`);
    process.exit(1);
  }
} else if (restored) {
  logger.info({ version: restored }, 'serving the configuration persisted in DATA_DIR');
}

try {
  const http = await agent.listen(config.HTTP_PORT, config.HOST);
  const https = config.HTTPS_PORT === 'off' ? null : await agent.listenHttps(config.HTTPS_PORT, config.HOST);
  const metrics = await agent.listenMetrics(config.METRICS_PORT, config.METRICS_HOST);
  logger.info({
    http_port: http.port, https_port: https?.port ?? null, metrics_port: metrics.port, config_version: agent.configVersion,
    control_plane: config.CONTROL_PLANE_URL ?? null,
  }, 'edge agent listening');
} catch (err) {
  process.stderr.write(`edge-agent: cannot listen: ${(err as Error).message}\n`);
  process.exit(1);
}

let control: ControlClient | null = null;
if (config.CONTROL_PLANE_URL) {
  // Until the control plane answers (and whenever it cannot be reached), the configuration persisted in DATA_DIR serves.
  const identity = loadOrCreateNodeId(config.DATA_DIR);
  if (identity.created) logger.info({ node_id: identity.nodeId }, 'new node id kept in DATA_DIR/node-id');
  control = new ControlClient({
    url: config.CONTROL_PLANE_URL,
    token: config.AGENT_TOKEN!,
    caPem,
    agent,
    nodeId: identity.nodeId,
    hostname: config.NODE_HOSTNAME ?? hostname(),
    region: config.REGION,
    agentVersion: agentVersion(),
    logger,
  });
  control.start();
}

process.on('SIGHUP', () => {
  reloadDefaultCertificate();
  if (!config.CONFIG_FILE) return;
  try {
    loadConfigFile(config.CONFIG_FILE);
  } catch (err) {
    logger.error({ err: (err as Error).message }, 'reloading the config file failed; the previous configuration keeps serving');
  }
});

let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    // Draining: the control plane hears it at once; viewers' requests in flight finish; then the stream ends cleanly.
    control?.drain();
    agent.close(config.SHUTDOWN_TIMEOUT_MS).then(
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
