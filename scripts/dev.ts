// `npm start`: the control plane and one edge agent on embedded defaults
// (PGlite database and in-process store under ./.data unless DATABASE_URL /
// REDIS_URL are set), the agent connected to the control plane over the
// control channel, then prints where to go next. Takes the control plane's
// flags (`npm start -- --port 9000 --data-dir /tmp/sp`) and the agent's port
// flags (--http-port, --metrics-port). Ctrl-C, SIGINT or SIGTERM stops both.
//
// The agent needs no human step: its token is issued through the control
// plane's agent-token command and kept in DATA_DIR/agent/agent-token (issued
// again when the control plane refuses it), and the demo endpoint it serves
// (found by name, created once, published) through the edge:demo-endpoint
// command. The summary is printed once the agent has applied the active
// configuration version.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, configVariables, flagsToEnv, loadConfig, type Config } from '../control-plane/src/config/config.ts';
import type { Command } from '../control-plane/src/db/command-channel.ts';
import { YOUNG_GENERATION_FLAG } from '../control-plane/src/heap-tuning.ts';
import { OUTBOX_LINKS_FILE } from '../control-plane/src/mail/outbox.ts';
import { agentPorts } from './dev-ports.ts';

// The agent's settings that make sense here (its DATA_DIR is DATA_DIR/agent, its LOG_LEVEL and HOST are shared).
const agentVariables = ['HTTP_PORT', 'HTTPS_PORT', 'METRICS_PORT', 'WORKERS', 'CACHE_MEMORY_BYTES', 'CACHE_DISK_BYTES', 'CACHE_MAX_OBJECT_BYTES', 'REGION'];

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(`Usage: npm start [-- --flag value ...]
Runs the control plane and one edge agent. Flags (each also an environment variable, --data-dir ↔ DATA_DIR):
  control plane: ${configVariables.map((v) => `--${v.toLowerCase().replace(/_/g, '-')}`).join(' ')}
  edge agent:    ${agentVariables.map((v) => `--${v.toLowerCase().replace(/_/g, '-')}`).join(' ')}`);
  process.exit(0);
}

let env: Record<string, string | undefined>;
let config: Config;
try {
  env = { ...process.env, ...flagsToEnv(process.argv.slice(2), [...configVariables, ...agentVariables]) };
  config = loadConfig(env);
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`npm start: ${error.message}`);
  process.exit(1);
}

const dataDir = config.dataDir;
const port = config.PORT;
const { http: agentPort, https: agentHttpsPort, metrics: agentMetricsPort } = agentPorts(env);
// One worker unless --workers says otherwise: each worker has a cache of its own, so with several the printed cache demo
// (two curl runs, two connections) could land on two workers and show MISS twice.
const agentWorkers = env.WORKERS ?? '1';
// Without --grpc-port, the control channel listens next to the HTTP port (8081 beside the default 8080), so
// two npm start on different --port values do not both want the default gRPC port.
const grpcPort = env.GRPC_PORT !== undefined || env.PORT === undefined || port >= 65535 ? config.GRPC_PORT : port + 1;
const logLevel = env.LOG_LEVEL ?? 'warn';
/** pino's level numbers: lines below the chosen level are not shown. */
const levels: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Infinity };
// The agent logs at info at least: npm start reads its connection and configuration lines (shown only at LOG_LEVEL info or below).
const agentLogLevel = (levels[logLevel] ?? 40) < levels.info! ? logLevel : 'info';
const base = config.PUBLIC_URL ? config.publicUrl : `http://localhost:${port}`;
const children: ChildProcess[] = [];
let stopping = false;
/** Lines the control plane prints about the first superadmin: shown in the summary, not as log lines. */
const credentials: string[] = [];

/** A log line of a child as JSON (pino), when it is one. */
type LogEntry = { level?: number; msg?: string; [field: string]: unknown };
/** Children stopped on purpose (the agent restarted with a new token): their exit stops nothing. */
const retired = new Set<ChildProcess>();

function start(
  name: string, script: string, nodeFlags: string[], childEnv: Record<string, string>, onEntry?: (entry: LogEntry) => boolean | void,
): ChildProcess {
  // The IPC channel lets the child notice when this process goes away, however it ends.
  const child = spawn(process.execPath, [...nodeFlags, script], { env: { ...env, ...childEnv }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  // Prefix each log line with the process it came from.
  for (const stream of [child.stdout!, child.stderr!]) {
    let buffered = '';
    let capturing = 0;
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        if (line.startsWith('First superadmin created')) capturing = 3;
        if (capturing > 0) {
          capturing--;
          credentials.push(line);
          continue;
        }
        if (!line) continue;
        let entry: LogEntry | undefined;
        try {
          entry = line.startsWith('{') ? JSON.parse(line) : undefined;
        } catch { /* not JSON: shown as it is */ }
        // A line the watcher handled itself (true) is not shown.
        if (entry && onEntry?.(entry) === true) continue;
        if (entry && typeof entry.level === 'number' && entry.level < (levels[logLevel] ?? 40)) continue;
        process.stdout.write(`[${name}] ${line}\n`);
      }
    });
  }
  child.on('exit', (code, signal) => {
    if (!stopping && !retired.has(child)) {
      console.error(`${name} exited (${signal ?? code}); stopping.`);
      void stop(1);
    }
  });
  children.push(child);
  return child;
}

async function waitFor(url: string, what: string, child: ChildProcess, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && child.exitCode === null) {
    try {
      if ((await fetch(url)).ok) return;
    } catch { /* not up yet */ }
    await sleep(250);
  }
  if (child.exitCode !== null) return new Promise(() => {}); // its exit handler stops everything
  console.error(`${what} did not become ready at ${url}; stopping.`);
  await stop(1);
}

/** Stops one child on purpose and waits for it to exit. */
async function retire(child: ChildProcess): Promise<void> {
  retired.add(child);
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
}

async function stop(code: number): Promise<never> {
  stopping = true;
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
  process.exit(code);
}
process.on('SIGINT', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
process.on('SIGHUP', () => void stop(0));

console.log(`Starting the control plane (data in ${dataDir}; the first start initialises the embedded database, ~10 s)...`);
// What the agent's token and the demo endpoint are made with: the control plane's own commands (loaded meanwhile).
const commandModules = Promise.all([
  import('../control-plane/src/capabilities.ts'), import('../control-plane/src/db/command-channel.ts'),
  import('../control-plane/src/edge-channel/index.ts'), import('../control-plane/src/cdn-config/index.ts'),
  import('../control-plane/src/cdn/edge-certificate-command.ts'),
]);
const controlPlane = start('control-plane', 'control-plane/src/main.ts', [YOUNG_GENERATION_FLAG], {
  DATA_DIR: dataDir, PORT: String(port), GRPC_PORT: String(grpcPort), LOG_LEVEL: logLevel,
});
await waitFor(`http://127.0.0.1:${port}/healthz`, 'the control plane', controlPlane);
const [{ entities }, { runCommand }, { agentTokenCommand }, { demoEndpointCommand }, { edgeCertificateCommand }] = await commandModules;

/**
 * Runs one of the control plane's commands as its CLI would: through the
 * running control plane's command socket on the embedded database, on
 * DATABASE_URL itself. Returns what it printed; a failure stops everything.
 */
async function controlPlaneCommand<A>(command: Command<A>, args: unknown): Promise<string> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCommand(command, command.args.parse(args), config, { entities, io: { out: (l) => out.push(l), err: (l) => err.push(l) } });
  if (code !== 0) {
    console.error(`npm start: ${command.name} failed: ${err.join(' ') || `exit code ${code}`}`);
    return stop(1);
  }
  return out.join('\n');
}

// The demo endpoint: one endpoint in the working configuration caching this control plane's API reference assets.
const demo = await controlPlaneCommand(demoEndpointCommand, { name: 'demo', origin_port: port });
const demoHostname = /hostname (\S+)/.exec(demo)![1]!;
const activeVersion = Number(/Active configuration version: (\d+)/.exec(demo)![1]);

// The agent's token: kept in DATA_DIR/agent/agent-token (0600) and reused; issued again when missing or refused.
const agentDir = path.join(dataDir, 'agent');
await fs.mkdir(agentDir, { recursive: true });
const tokenFile = path.join(agentDir, 'agent-token');
async function issueAgentToken(): Promise<string> {
  const out = await controlPlaneCommand(agentTokenCommand, {
    action: 'create', name: 'npm start', description: `The edge agent npm start runs on ${dataDir} (its token is in agent/agent-token)`,
  });
  const token = /AGENT_TOKEN\): (\S+)/.exec(out)![1]!;
  const partial = `${tokenFile}.${process.pid}`;
  await fs.writeFile(partial, `${token}\n`, { mode: 0o600 });
  await fs.rename(partial, tokenFile);
  await fs.chmod(tokenFile, 0o600);
  return token;
}
// The agent's default certificate, *.CDN_DOMAIN from the control plane's internal CA (issued anew at each start, 90 days),
// in DATA_DIR/agent/tls: cdn.pem (chain), cdn.key (0600), ca.pem (the CA to trust, e.g. curl --cacert).
const tlsDir = path.join(agentDir, 'tls');
await fs.mkdir(tlsDir, { recursive: true, mode: 0o700 });
const issued = JSON.parse(await controlPlaneCommand(edgeCertificateCommand, {})) as { certificate_pem: string; private_key_pem: string; ca_pem: string };
const tlsFiles = { cert: path.join(tlsDir, 'cdn.pem'), key: path.join(tlsDir, 'cdn.key'), ca: path.join(tlsDir, 'ca.pem') };
for (const [file, content, mode] of [[tlsFiles.key, issued.private_key_pem, 0o600], [tlsFiles.cert, issued.certificate_pem, 0o644], [tlsFiles.ca, issued.ca_pem, 0o644]] as const) {
  const partial = `${file}.${process.pid}`;
  await fs.writeFile(partial, content, { mode });
  await fs.rename(partial, file);
}

let agentToken = (await fs.readFile(tokenFile, 'utf8').catch(() => '')).trim();
let tokenIssued = false;
if (!agentToken) {
  agentToken = await issueAgentToken();
  tokenIssued = true;
}

/**
 * Starts the agent on the control channel; resolves once it has the active
 * configuration version (it says so in its log), or with 'refused' when the
 * control plane refused its token.
 */
function startAgent(token: string, retryOnRefusal: boolean): { child: ChildProcess; ready: Promise<'ready' | 'refused'> } {
  let settle: (outcome: 'ready' | 'refused') => void = () => {};
  const ready = new Promise<'ready' | 'refused'>((resolve) => (settle = resolve));
  const child = start('edge-agent', 'edge-agent/src/main.ts', [], {
    DATA_DIR: agentDir, HTTP_PORT: String(agentPort), HTTPS_PORT: String(agentHttpsPort), METRICS_PORT: String(agentMetricsPort), LOG_LEVEL: agentLogLevel,
    TLS_CERT_FILE: tlsFiles.cert, TLS_KEY_FILE: tlsFiles.key, WORKERS: agentWorkers,
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${grpcPort}`, AGENT_TOKEN: token,
  }, (entry) => {
    if (entry.msg?.startsWith('the control plane refused the agent token')) {
      settle('refused');
      return retryOnRefusal; // npm start says it issues a new token instead
    }
    // Connected with the version already (kept in its DATA_DIR from an earlier start), or applying it now.
    else if (entry.msg === 'connected to the control plane' && Number(entry.config_version) >= activeVersion) settle('ready');
    else if (entry.msg === 'configuration applied' && Number(entry.version) >= activeVersion) settle('ready');
  });
  return { child, ready };
}

async function waitForAgent(ready: Promise<'ready' | 'refused'>): Promise<'ready' | 'refused'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), 120_000)));
  const outcome = await Promise.race([ready, timeout]).finally(() => clearTimeout(timer));
  if (outcome !== 'timeout') return outcome;
  console.error(`the edge agent did not apply configuration version ${activeVersion} within 120 s; stopping.`);
  return stop(1);
}

await fs.rm(path.join(agentDir, 'demo-snapshot.json'), { force: true }); // the snapshot file earlier versions of npm start wrote
let agent = startAgent(agentToken, !tokenIssued);
if ((await waitForAgent(agent.ready)) === 'refused') {
  // Revoked or expired (or from another database): a new one, and the agent again with it.
  console.log(`The control plane refused the agent token in ${tokenFile}; issuing a new one.`);
  await retire(agent.child);
  agentToken = await issueAgentToken();
  tokenIssued = true;
  agent = startAgent(agentToken, false);
  if ((await waitForAgent(agent.ready)) === 'refused') {
    console.error('The control plane refused a token it has just issued; stopping.');
    await stop(1);
  }
}
await waitFor(`http://127.0.0.1:${agentMetricsPort}/healthz`, 'the edge agent', agent.child);

const credentialText = credentials.join('\n');
const adminEmail = /e-mail:\s+(\S+)/.exec(credentialText)?.[1];
const adminPassword = /password:\s+(\S+)/.exec(credentialText)?.[1];
const loginCommand = `curl -s -X POST ${base}/v1/auth/login -H 'content-type: application/json' -d '{"email":"${adminEmail}","password":"${adminPassword}"}'`;

/** The first superadmin's credentials (first start only), or how to set a new password. */
function firstAdmin(): string {
  if (!adminEmail || !adminPassword) {
    return `  Superadmin         ${config.ADMIN_EMAIL}, whose password the first start printed; to set a new one:
                       npm run admin:create -- --email ${config.ADMIN_EMAIL} --password '<new password>'${sameData}
`;
  }
  return `
  First superadmin (shown this once: store the password safely)
    e-mail           ${adminEmail}
    password         ${adminPassword}
    Log in           ${loginCommand}
                     or open ${base}/login
`;
}

/** The edge nodes list: as two commands while the superadmin's password is known (first start), otherwise the route. */
function edgeNodes(): string {
  if (!adminEmail || !adminPassword) return `    Edge nodes       GET /v1/cdn/edge-nodes with an admin's bearer token (POST /v1/auth/login answers one)`;
  return `    Edge nodes       TOKEN=$(${loginCommand} | sed -n 's/.*"access_token":"\\([^"]*\\)".*/\\1/p')
                     curl -s -H "Authorization: Bearer $TOKEN" ${base}/v1/cdn/edge-nodes`;
}

// curl and browsers resolve *.localhost to loopback (CDN_DOMAIN's default is cdn.localhost); another domain needs the Host header.
const demoUrl = demoHostname.endsWith('.localhost')
  ? `http://${demoHostname}:${agentPort}/`
  : `curl -s -H 'Host: ${demoHostname}' http://localhost:${agentPort}/`;
// Over HTTPS the name must be in the URL (SNI picks the certificate): *.localhost resolves to loopback, another domain needs --resolve.
const httpsDemo = demoHostname.endsWith('.localhost')
  ? `curl -sI --cacert ${tlsFiles.ca} https://${demoHostname}:${agentHttpsPort}/docs/swagger-ui.css`
  : `curl -sI --cacert ${tlsFiles.ca} --resolve ${demoHostname}:${agentHttpsPort}:127.0.0.1 https://${demoHostname}:${agentHttpsPort}/docs/swagger-ui.css`;
const defaultDataDir = path.resolve('.data') === dataDir;
const sameData = defaultDataDir ? '' : ` --data-dir ${JSON.stringify(dataDir)}`;
const outboxDir = path.join(dataDir, 'outbox');
const outbox = config.SMTP_URL
  ? 'is sent through SMTP_URL; open its link'
  : `is written to ${outboxDir}; its link is the last one in ${path.join(outboxDir, OUTBOX_LINKS_FILE)}: open it`;
console.log(`
Ready.
  Control plane      ${base}/
    API reference    ${base}/docs   (OpenAPI: ${base}/openapi.json)
    Readiness        ${base}/v1/cdn/health/ready
    Metrics          ${base}/metrics
    Control channel  grpc://127.0.0.1:${grpcPort}   (the edge agent's token: ${tokenFile}${tokenIssued ? ', issued now' : ''})
  Edge agent         ${demoUrl}   (the demo endpoint, caching this control plane; configuration version ${activeVersion})
    Cache demo       curl -sI -H 'Host: ${demoHostname}' http://localhost:${agentPort}/docs/swagger-ui.css   (run twice: MISS, then HIT)
    Over HTTPS       ${httpsDemo}
                     (the certificate is *.${config.CDN_DOMAIN} from the control plane's internal CA: ${tlsFiles.ca})
    Health, metrics  http://localhost:${agentMetricsPort}/healthz   http://localhost:${agentMetricsPort}/metrics
${edgeNodes()}
${firstAdmin()}
Next steps:
  Register a user:   curl -s -X POST ${base}/v1/auth/register -H 'content-type: application/json' \\
                       -d '{"email":"me@example.com","password":"Change-me-123","accept_terms":true}'
                     The verification e-mail ${outbox} and enter the password to confirm the address.
  Another admin:     npm run admin:create -- --email you@example.com${sameData}
Ctrl-C stops both processes.`);
