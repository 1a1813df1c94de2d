// A CDN deployment for cross-process tests of the edge: a control-plane
// process on its own database (the superadmin it prints logged in, an agent
// token issued), edge-agent processes connected to it, an origin, and a
// viewer's requests through an agent. Waits are for lines, answers and
// states, never for time.
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { eventually } from './eventually.ts';
import { freePort } from './private-services.ts';
import { startControlPlaneProcess, type RunningProcess } from './processes.ts';

interface Teardown { teardown(fn: () => unknown): void }

export interface ApiReply { status: number; body: any }

export interface Deployment {
  process: RunningProcess & { url: string };
  database: TestDatabase;
  grpcPort: number;
  /** An agent token issued for this deployment's agents. */
  agentToken: string;
  /** The superadmin's access token (e.g. for another replica on the same database). */
  accessToken: string;
  api(method: string, path: string, json?: unknown, headers?: Record<string, string>): Promise<ApiReply>;
  /** As api, throwing on a status of 300 or more. */
  must(method: string, path: string, json?: unknown): Promise<any>;
}

/**
 * Starts a control-plane process on a database of its own (or the one given) with the environment given
 * (REDIS_URL included when Redis is wanted), logs in its superadmin and issues an agent token.
 */
export async function startDeployment(t: Teardown, options: { postgresUrl: string; env?: Record<string, string>; database?: TestDatabase }): Promise<Deployment> {
  const database = options.database ?? await createTestDatabase({ postgresUrl: options.postgresUrl });
  if (!options.database) t.teardown(() => database.dispose());
  const proc = await startControlPlaneProcess(t, {
    DATABASE_URL: database.url, SECRETS_KEY: randomBytes(32).toString('hex'), NODE_ENV: 'development', LOG_LEVEL: 'info', PUBLIC_URL: '',
    GRPC_PORT: '0', CDN_PUBLISH_MODE: 'manual', EDGE_HEARTBEAT_INTERVAL_MS: '500', JOBS_WORKER: 'true', REDIS_URL: '',
    // Tests poll the API while they wait (eventually): no per-address budget to run out of.
    RATE_LIMIT_PER_MINUTE: '0',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'sp-deploy-')), ...options.env,
  });
  const grpcPort = Number((await proc.waitForLine(/"port":(\d+).*edge control channel listening/))[1]);
  const email = (await proc.waitForLine(/^\s+e-mail:\s+(\S+)/))[1]!;
  const password = (await proc.waitForLine(/^\s+password:\s+(\S+)/))[1]!;
  const login = await fetch(`${proc.url}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  const accessToken = ((await login.json()) as { data: { access_token: string } }).data.access_token;
  const api = async (method: string, path: string, json?: unknown, headers: Record<string, string> = {}): Promise<ApiReply> => {
    const res = await fetch(`${proc.url}${path}`, {
      method, headers: { authorization: `Bearer ${accessToken}`, ...(json === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: json === undefined ? undefined : JSON.stringify(json),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
  const must = async (method: string, path: string, json?: unknown) => {
    const res = await api(method, path, json);
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const agentToken = (await must('POST', '/v1/cdn/agent-tokens', { name: 'test agents' })).token as string;
  return { process: proc, database, grpcPort, agentToken, accessToken, api, must };
}

export interface AgentProcess {
  port: number;
  logs: string[];
  child: import('node:child_process').ChildProcess;
}

/** An edge-agent process connected to the control channel on `grpcPort` (a proxy's port to cut it off), killed at teardown. */
export async function startEdgeAgent(t: Teardown, deployment: Pick<Deployment, 'agentToken'>, grpcPort: number, name: string, env: Record<string, string> = {}): Promise<AgentProcess> {
  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${grpcPort}`, AGENT_TOKEN: deployment.agentToken, DATA_DIR: mkdtempSync(join(tmpdir(), `sp-agent-${name}-`)),
    REGION: 'test', NODE_HOSTNAME: name, SHUTDOWN_TIMEOUT_MS: '1000', ...env,
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  return agent;
}

export interface AgentHealth {
  /** ok, degraded, or unauthorized while the control plane refuses the agent's token (/healthz then answers 503). */
  status: string;
  purge_sequence: number; config_version: number; cache_objects: number; control_plane_cut_off: boolean;
  control_plane_token_refused: { code: string; reason: string; since: string } | null;
}

/** The agent's /healthz URL, on the metrics port its start line names. */
export function agentHealthUrl(agent: Pick<AgentProcess, 'logs'>): string {
  const port = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
  return `http://127.0.0.1:${port}/healthz`;
}

/** The agent's /healthz (its applied configuration version and purge sequence, whether it is cut off from the control plane). */
export async function agentHealth(agent: Pick<AgentProcess, 'logs'>): Promise<AgentHealth> {
  return (await fetch(agentHealthUrl(agent))).json() as Promise<AgentHealth>;
}

export interface ViewerReply { status: number; headers: http.IncomingHttpHeaders; body: string }

/** A viewer's GET through an agent, with the given Host. */
export function viewerGet(port: number, host: string, path: string, headers: Record<string, string> = {}): Promise<ViewerReply> {
  return viewerRequest(port, host, 'GET', path, headers);
}

/** A viewer's request through an agent, with the given Host (and body). */
export function viewerRequest(port: number, host: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<ViewerReply> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: { host, ...headers }, timeout: 10_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c)).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error('viewer request timed out'))).on('error', reject).end(body);
  });
}

/** An agent that shields its region: SHIELD_ADDRESS names its own HTTP port, unless `address` names another place (a silent server, a closed port). */
export async function startShieldAgent(t: Teardown, deployment: Pick<Deployment, 'agentToken' | 'grpcPort'>, name: string, region: string, env: Record<string, string> = {}, address?: string): Promise<AgentProcess> {
  const port = await freePort();
  return startEdgeAgent(t, deployment, deployment.grpcPort, name, { REGION: region, HTTP_PORT: String(port), SHIELD_ADDRESS: address ?? `http://127.0.0.1:${port}`, ...env });
}

/** The agent's Prometheus exposition, from the metrics port its start line names. */
export async function agentMetrics(agent: Pick<AgentProcess, 'logs'>): Promise<string> {
  return (await fetch(agentHealthUrl(agent).replace(/\/healthz$/, '/metrics'))).text();
}

/** The sum of a metric's series whose labels include every label given (0 when none). */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** An origin answering every GET with its path and a counter, cacheable for five minutes unless `handler` answers. */
export async function startCountingOrigin(t: Teardown, handler?: (req: http.IncomingMessage, res: http.ServerResponse, n: number) => boolean | void): Promise<{ port: number; served: () => number }> {
  let served = 0;
  const origin = http.createServer((req, res) => {
    served++;
    if (handler?.(req, res, served)) return;
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'public, max-age=300' });
    res.end(`${req.url} #${served}`);
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { origin.closeAllConnections(); origin.close(() => resolve()); }));
  return { port: (origin.address() as { port: number }).port, served: () => served };
}

/** An origin and an endpoint on it, published; returns the endpoint record. */
export async function publishedEndpoint(deployment: Deployment, originPort: number, name: string): Promise<{ id: string; hostname: string }> {
  const endpoint = await endpointOn(deployment, originPort, name);
  await deployment.must('POST', '/v1/cdn/config/publish', { description: name });
  return endpoint;
}

/** An endpoint on an origin of its own at 127.0.0.1:port (an origin belongs to one endpoint). */
export async function endpointOn(deployment: Deployment, port: number, name: string, fields: Record<string, unknown> = {}): Promise<{ id: string; hostname: string }> {
  // The SSRF check lets a private origin through only when asked to.
  const origin = await deployment.must('POST', '/v1/cdn/origins', { name: `${name} origin`, scheme: 'http', host: '127.0.0.1', port, allow_private_network: true });
  return deployment.must('POST', '/v1/cdn/endpoints', { name, default_origin_id: origin.id, ...fields });
}

/** Publishes the configuration and waits until every agent given serves it; returns its version. */
export async function publishedToAll(deployment: Deployment, agents: AgentProcess[], description: string): Promise<number> {
  const { version_number: version } = await deployment.must('POST', '/v1/cdn/config/publish', { description });
  for (const agent of agents) await eventually(async () => (await agentHealth(agent)).config_version === version, `${description}: every agent has version ${version}`);
  return version;
}

/** Waits until every agent given has applied a shield map with nodes in each region given. */
export async function shieldsKnown(agents: AgentProcess[], regions: string[]): Promise<void> {
  const known = (line: string) => line.includes('shield map applied') && regions.every((r) => line.includes(`"${r}:`));
  for (const agent of agents) await eventually(() => agent.logs.some(known), `an agent knows the shields of ${regions.join(', ')}`);
}
