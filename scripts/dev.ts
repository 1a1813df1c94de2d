// `npm start`: the control plane and one edge agent on embedded defaults
// (PGlite database and in-process store under ./.data unless DATABASE_URL /
// REDIS_URL are set), then prints where to go next. Takes the control plane's
// flags (`npm start -- --port 9000 --data-dir /tmp/sp`) and the agent's port
// flags (--http-port, --metrics-port). Ctrl-C, SIGINT or SIGTERM stops both.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, configVariables, flagsToEnv, loadConfig, type Config } from '../control-plane/src/config/config.ts';

// The agent's settings that make sense here (its DATA_DIR is DATA_DIR/agent, its LOG_LEVEL and HOST are shared).
const agentVariables = ['HTTP_PORT', 'METRICS_PORT', 'CACHE_MEMORY_BYTES', 'CACHE_DISK_BYTES', 'CACHE_MAX_OBJECT_BYTES', 'REGION'];

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
const agentPort = Number(env.HTTP_PORT ?? 8090);
const agentMetricsPort = Number(env.METRICS_PORT ?? 9091);
const logLevel = env.LOG_LEVEL ?? 'warn';
const base = config.PUBLIC_URL ? config.publicUrl : `http://localhost:${port}`;
const children: ChildProcess[] = [];
let stopping = false;
/** Lines the control plane prints about the first superadmin: shown in the summary, not as log lines. */
const credentials: string[] = [];

function start(name: string, script: string, args: string[], childEnv: Record<string, string>): ChildProcess {
  // The IPC channel lets the child notice when this process goes away, however it ends.
  const child = spawn(process.execPath, [script, ...args], { env: { ...env, ...childEnv }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
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
        if (line) process.stdout.write(`[${name}] ${line}\n`);
      }
    });
  }
  child.on('exit', (code, signal) => {
    if (!stopping) {
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
const controlPlane = start('control-plane', 'control-plane/src/main.ts', [], { DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: logLevel });
await waitFor(`http://127.0.0.1:${port}/healthz`, 'the control plane', controlPlane);

// Until the control channel lands, the agent runs from a snapshot: one demo
// endpoint that caches the control plane's own static API reference assets.
const agentDir = path.join(dataDir, 'agent');
await fs.mkdir(agentDir, { recursive: true });
const snapshotFile = path.join(agentDir, 'demo-snapshot.json');
await fs.writeFile(snapshotFile, JSON.stringify({
  version: 1,
  endpoints: [{
    id: 'demo',
    name: 'Demo endpoint',
    hostname: 'demo.localhost',
    default_origin_id: 'control-plane',
    origins: [{ id: 'control-plane', name: 'Control plane', scheme: 'http', host: '127.0.0.1', port, allow_private_network: true }],
    cache_rules: [{ id: 'docs-assets', name: 'API reference assets', match: { paths: ['/docs/*'] }, ttl_seconds: 300 }],
  }],
}, null, 2));
const agent = start('edge-agent', 'edge-agent/src/main.ts', ['--config-file', snapshotFile], {
  DATA_DIR: agentDir, HTTP_PORT: String(agentPort), METRICS_PORT: String(agentMetricsPort), LOG_LEVEL: logLevel,
});
await waitFor(`http://127.0.0.1:${agentMetricsPort}/healthz`, 'the edge agent', agent);

/** The first superadmin's credentials (first start only), or how to set a new password. */
function firstAdmin(): string {
  const email = /e-mail:\s+(\S+)/.exec(credentials.join('\n'))?.[1];
  const password = /password:\s+(\S+)/.exec(credentials.join('\n'))?.[1];
  if (!email || !password) {
    return `  Superadmin         ${config.ADMIN_EMAIL}, whose password the first start printed; to set a new one:
                       npm run admin:create -- --email ${config.ADMIN_EMAIL} --password '<new password>'${sameData}
`;
  }
  return `
  First superadmin (shown this once: store the password safely)
    e-mail           ${email}
    password         ${password}
    Log in           curl -s -X POST ${base}/v1/auth/login -H 'content-type: application/json' -d '{"email":"${email}","password":"${password}"}'
                     or open ${base}/login
`;
}

const defaultDataDir = path.resolve('.data') === dataDir;
const sameData = defaultDataDir ? '' : ` --data-dir ${JSON.stringify(dataDir)}`;
const outbox = config.SMTP_URL ? 'is sent through SMTP_URL' : `is written to ${path.join(dataDir, 'outbox')}`;
console.log(`
Ready.
  Control plane      ${base}/
    API reference    ${base}/docs   (OpenAPI: ${base}/openapi.json)
    Readiness        ${base}/v1/cdn/health/ready
    Metrics          ${base}/metrics
  Edge agent         http://demo.localhost:${agentPort}/   (a demo endpoint caching this control plane; metrics: http://localhost:${agentMetricsPort}/metrics)
    Cache demo       curl -sI -H 'Host: demo.localhost' http://localhost:${agentPort}/docs/swagger-ui.css   (run twice: MISS, then HIT)
${firstAdmin()}
Next steps:
  Register a user:   curl -s -X POST ${base}/v1/auth/register -H 'content-type: application/json' \\
                       -d '{"email":"me@example.com","password":"Change-me-123","accept_terms":true}'
                     The verification e-mail ${outbox}; open its link to confirm the address.
  Another admin:     npm run admin:create -- --email you@example.com${sameData}
Ctrl-C stops both processes.`);
