// `npm start`: the control plane and one edge agent on embedded defaults
// (PGlite database and in-process store under ./.data unless DATABASE_URL /
// REDIS_URL are set), then prints where to go next. Ctrl-C stops both.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const dataDir = path.resolve(process.env.DATA_DIR ?? '.data');
const port = Number(process.env.PORT ?? 8080);
const agentPort = Number(process.env.HTTP_PORT ?? 8090);
const agentMetricsPort = Number(process.env.METRICS_PORT ?? 9091);
const children: ChildProcess[] = [];
let stopping = false;

function start(name: string, script: string, args: string[], env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, [script, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  // Prefix each log line with the process it came from.
  for (const stream of [child.stdout!, child.stderr!]) {
    let buffered = '';
    stream.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) if (line) process.stdout.write(`[${name}] ${line}\n`);
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

async function waitFor(url: string, what: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(url)).ok) return;
    } catch { /* not up yet */ }
    await sleep(250);
  }
  throw new Error(`${what} did not become ready at ${url}`);
}

async function stop(code: number): Promise<never> {
  stopping = true;
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
  process.exit(code);
}
process.on('SIGINT', () => void stop(0));
process.on('SIGTERM', () => void stop(0));

console.log(`Starting the control plane (data in ${dataDir}; the first start initialises the embedded database, ~10 s)...`);
start('control-plane', 'control-plane/src/main.ts', [], { DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' });
await waitFor(`http://127.0.0.1:${port}/healthz`, 'the control plane');

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
start('edge-agent', 'edge-agent/src/main.ts', ['--config-file', snapshotFile], {
  DATA_DIR: agentDir, HTTP_PORT: String(agentPort), METRICS_PORT: String(agentMetricsPort), LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
});
await waitFor(`http://127.0.0.1:${agentMetricsPort}/healthz`, 'the edge agent');

console.log(`
Ready.
  Control plane      http://localhost:${port}
    API reference    http://localhost:${port}/docs   (OpenAPI: /openapi.json)
    Readiness        http://localhost:${port}/v1/cdn/health/ready
    Metrics          http://localhost:${port}/metrics
  Edge agent         http://localhost:${agentPort}   (metrics: http://localhost:${agentMetricsPort}/metrics)
    Demo endpoint    curl -sI -H 'Host: demo.localhost' http://localhost:${agentPort}/docs/swagger-ui.css   (run twice: MISS, then HIT)

Next steps:
  Create the first superadmin:  npm run admin:create -- --email you@example.com
  Register a user:              curl -s -X POST localhost:${port}/v1/auth/register -H 'content-type: application/json' \\
                                  -d '{"email":"me@example.com","password":"Change-me-123","accept_terms":true}'
  Verification links and other e-mail land in ${path.join(dataDir, 'outbox')} (no SMTP_URL set).
Ctrl-C stops both processes.`);
