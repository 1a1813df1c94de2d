// Test scaffolding: a real node:http origin and a real agent, both on 127.0.0.1 port 0.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { EdgeAgent, type EdgeAgentOptions } from '../src/agent.ts';

export interface Origin {
  server: Server;
  port: number;
  /** Requests the origin received, in order. */
  requests: { method: string; url: string; headers: IncomingMessage['headers'] }[];
  count: (path?: string) => number;
  /** Resolves once the origin has received n requests for the path (any path when undefined). */
  received: (path?: string, n?: number) => Promise<void>;
  close: () => Promise<void>;
}

export async function startOrigin(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Origin> {
  const requests: Origin['requests'] = [];
  const waiters: { path: string | undefined; n: number; resolve: () => void }[] = [];
  const count = (path?: string) => requests.filter((r) => path === undefined || r.url === path).length;
  const server = createServer((req, res) => {
    requests.push({ method: req.method!, url: req.url!, headers: req.headers });
    for (const w of [...waiters]) {
      if (count(w.path) >= w.n) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    requests,
    count,
    received: (path, n = 1) => (count(path) >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ path, n, resolve }))),
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

/** The origin's requests from viewers (an agent's health probes, which go to every origin's root or health_check_url, left out). */
export const viewerRequests = (origin: Origin) => origin.requests.filter((r) => r.headers['user-agent'] !== 'edge-agent-health/1');

export const HOST = 'cdn.test';

export function snapshotFor(originPort: number, extra: { endpoint?: Record<string, unknown>; origin?: Record<string, unknown>; cache_rules?: unknown[]; routes?: unknown[]; origins?: unknown[]; version?: number } = {}) {
  return {
    version: extra.version ?? 1,
    endpoints: [{
      id: 'ep1',
      hostname: HOST,
      default_origin_id: 'o1',
      origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: originPort, allow_private_network: true, max_retries: 0, timeout_ms: 5000, ...extra.origin }, ...(extra.origins ?? [])],
      routes: extra.routes ?? [],
      cache_rules: extra.cache_rules ?? [],
      ...extra.endpoint,
    }],
  };
}

export interface TestAgent {
  agent: EdgeAgent;
  port: number;
  dataDir: string;
  get: (path: string, headers?: Record<string, string>, method?: string, body?: string) => Promise<{ status: number; headers: Record<string, string>; body: string }>;
  close: () => Promise<void>;
}

export async function startAgent(snapshot: unknown, options: Partial<EdgeAgentOptions> = {}): Promise<TestAgent> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'edge-agent-test-'));
  const agent = new EdgeAgent({ dataDir, memoryBytes: 64 * 1024 * 1024, maxObjectBytes: 8 * 1024 * 1024, healthProbes: false, ...options });
  if (snapshot) agent.applyConfig(snapshot);
  const { port } = await agent.listen(0, '127.0.0.1');
  const get: TestAgent['get'] = async (path, headers = {}, method = 'GET', body) => {
    const res = await request(`http://127.0.0.1:${port}${path}`, { method: method as 'GET', headers: { host: HOST, ...headers }, body });
    const text = await res.body.text();
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: res.statusCode, headers: h, body: text };
  };
  return {
    agent,
    port,
    dataDir,
    get,
    close: async () => {
      await agent.close(1000);
      if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A wall clock a test moves forward, given to the agent as its `clock`: a freshness lifetime passes at once
 * instead of being slept through. An origin that sends Date should send `httpDate()`, this clock's time.
 */
export function testClock(): { now: () => number; advance: (ms: number) => void; httpDate: () => string } {
  let offset = 0;
  const now = () => Date.now() + offset;
  return { now, advance: (ms) => { offset += ms; }, httpDate: () => new Date(now()).toUTCString() };
}

export interface RawResponse {
  status: number;
  /** Lower-case names; repeated fields joined with ", ". */
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends the request bytes as written (request line, header lines, body) on a
 * fresh connection and reads one response until the agent closes it. For
 * requests a client library would refuse or rewrite: duplicate Host, absolute
 * form, dot segments, odd Connection fields. The head should carry
 * "Connection: close" (or be HTTP/1.0) so the connection ends after the answer.
 */
export function rawRequest(port: number, head: string[], body = ''): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(head.join('\r\n') + '\r\n\r\n' + body, 'latin1'));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) return reject(new Error(`no complete response: ${JSON.stringify(text)}`));
      const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        const name = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim();
        headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
      }
      let body = text.slice(end + 4);
      if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
        let out = '';
        for (let at = 0; ;) {
          const nl = body.indexOf('\r\n', at);
          const size = parseInt(body.slice(at, nl), 16);
          if (!(size > 0)) break;
          out += body.slice(nl + 2, nl + 2 + size);
          at = nl + 2 + size + 2;
        }
        body = out;
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body });
    });
  });
}

const agentMain = fileURLToPath(new URL('../src/main.ts', import.meta.url));

/**
 * The real agent process (node edge-agent/src/main.ts) on loopback with ports
 * picked by the system; resolves once it listens, with its HTTP port and its
 * log lines (which keep accumulating).
 */
export function startAgentProcess(env: Record<string, string>): Promise<{ child: ChildProcess; port: number; logs: string[] }> {
  const child = spawn(process.execPath, [agentMain], { env: { ...process.env, HOST: '127.0.0.1', METRICS_HOST: '127.0.0.1', HTTP_PORT: '0', HTTPS_PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'info', WORKERS: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  return new Promise((resolve, reject) => {
    let buf = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        logs.push(line);
        const m = line.includes('"msg":"edge agent listening"') ? /"http_port":(\d+)/.exec(line) : null;
        if (m) resolve({ child, port: Number(m[1]), logs });
      }
    });
    child.stderr!.on('data', (c: Buffer) => logs.push(c.toString()));
    child.once('exit', (code) => reject(new Error(`agent exited early (${code}): ${logs.join('\n')}`)));
  });
}

/**
 * An agent process serving a snapshot from a configuration file in a fresh directory (its data directory beside it),
 * killed and the directory removed at the test's teardown; with the port of its metrics.
 */
export async function startConfiguredAgent(t: { teardown: (fn: () => void) => void }, snapshot: unknown, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'edge-agent-process-'));
  const configFile = join(dir, 'snapshot.json');
  writeFileSync(configFile, JSON.stringify(snapshot));
  const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), ...env });
  t.teardown(() => {
    agent.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
  return { ...agent, metricsPort };
}

export const exitOf = (child: ChildProcess) => new Promise<number | null>((r) => (child.exitCode !== null ? r(child.exitCode) : child.once('exit', (code) => r(code))));
