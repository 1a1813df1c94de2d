// A PostgreSQL server and a Redis server of one test's own, on free loopback
// ports in temporary directories, which the test may stop, start and restart
// (the machine's shared servers serve every other test file at the same
// time: they are never restarted). PostgreSQL runs as the `postgres` user
// when the test runs as root (initdb refuses root), as the current user
// otherwise. `privateServicesMissing()` says which binary is absent.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { reachable } from './services.ts';

interface Teardown { teardown(fn: () => unknown): void }

/** The directory of PostgreSQL's server binaries (initdb, pg_ctl), the newest installed. */
function postgresBinDir(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(root, versions[0], 'bin') : undefined;
}

function redisServerBinary(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/local/bin'])) {
    if (dir && existsSync(join(dir, 'redis-server'))) return join(dir, 'redis-server');
  }
  return undefined;
}

/** Why private servers cannot be started here (a missing binary), or undefined when they can. */
export function privateServicesMissing(): string | undefined {
  if (!postgresBinDir()) return 'PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb, pg_ctl)';
  if (!redisServerBinary()) return 'redis-server';
  return undefined;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject).listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function waitUntil(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs / 1000} s`);
    await sleep(50);
  }
}

export interface PrivateServer {
  /** Connection URL (PostgreSQL: the `postgres` database as the superuser `postgres`). */
  url: string;
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** stop then start; resolves once it accepts connections again. */
  restart(): Promise<void>;
}

const runningAsRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL binary as the user that owns the cluster. */
function pgCommand(bin: string, args: string[]): { command: string; args: string[] } {
  return runningAsRoot ? { command: 'runuser', args: ['-u', 'postgres', '--', bin, ...args] } : { command: bin, args };
}

function runPg(bin: string, args: string[], timeoutMs: number): void {
  const { command, args: full } = pgCommand(bin, args);
  execFileSync(command, full, { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
}

/** A PostgreSQL cluster of its own (fsync off: a restart is a clean shutdown, what was committed stays). */
export async function startPrivatePostgres(t: Teardown): Promise<PrivateServer> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('PostgreSQL server binaries not found');
  const dir = mkdtempSync(join(tmpdir(), 'sp-private-pg-'));
  if (runningAsRoot) chownSync(dir, Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), Number(execFileSync('id', ['-g', 'postgres']).toString().trim()));
  const data = join(dir, 'data');
  runPg(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C'], 120_000);
  const port = await freePort();
  const url = `postgresql://postgres@127.0.0.1:${port}/postgres`;
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=100 -c shared_buffers=32MB`;
  let running = false;
  const server: PrivateServer = {
    url,
    port,
    async start() {
      runPg(join(bin, 'pg_ctl'), ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '60', 'start'], 70_000);
      running = true;
      await waitUntil(() => reachable(url), 'PostgreSQL did not accept connections', 30_000);
    },
    async stop() {
      // fast: open sessions are ended and every committed transaction is kept (a clean shutdown checkpoint).
      runPg(join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop'], 70_000);
      running = false;
    },
    async restart() {
      await server.stop();
      await server.start();
    },
  };
  await server.start();
  t.teardown(async () => {
    if (running) await server.stop().catch(() => runPg(join(bin, 'pg_ctl'), ['-D', data, '-m', 'immediate', 'stop'], 30_000));
    rmSync(dir, { recursive: true, force: true });
  });
  return server;
}

/** A redis-server of its own, with an append-only file synced on every write, so a restart keeps what it acknowledged. */
export async function startPrivateRedis(t: Teardown): Promise<PrivateServer> {
  const binary = redisServerBinary();
  if (!binary) throw new Error('redis-server not found');
  const dir = mkdtempSync(join(tmpdir(), 'sp-private-redis-'));
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const server: PrivateServer = {
    url,
    port,
    async start() {
      child = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--protected-mode', 'no'], { stdio: 'ignore' });
      await waitUntil(() => reachable(url), 'redis-server did not accept connections', 20_000);
    },
    async stop() {
      const running = child;
      if (!running || running.exitCode !== null || running.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
      running.kill('SIGTERM');
      await Promise.race([exited, sleep(10_000).then(() => { running.kill('SIGKILL'); return exited; })]);
    },
    async restart() {
      await server.stop();
      await server.start();
    },
  };
  await server.start();
  t.teardown(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return server;
}
