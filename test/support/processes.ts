// Real processes for tests of the commands people run: the control plane
// (`node control-plane/src/main.ts`), the CLIs and `npm start`. Output is
// collected line by line; waits are for a line or an exit, never for time.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { YOUNG_GENERATION_FLAG } from '../../control-plane/src/heap-tuning.ts';

export const repoRoot = path.resolve(import.meta.dirname, '../..');

export interface RunningProcess {
  child: ChildProcess;
  pid: number;
  /** Everything printed so far, stdout and stderr apart. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line matching (including lines already printed); rejects if the process exits first. */
  waitForLine(pattern: RegExp): Promise<RegExpExecArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM (or the given signal) and wait for the exit. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

interface Teardown { teardown(fn: () => unknown): void }

export function startProcess(t: Teardown, command: string, args: string[], env: Record<string, string | undefined>): RunningProcess {
  const child = spawn(command, args, { cwd: repoRoot, env: { ...process.env, ...env } as NodeJS.ProcessEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
    for (const wake of waiters) wake();
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => {
      for (const wake of waiters) wake();
      resolve({ code, signal });
    });
  });
  let done = false;
  void exited.then(() => (done = true));
  t.teardown(async () => {
    if (!done) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  return {
    child,
    pid: child.pid!,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForLine(pattern) {
      return new Promise((resolve, reject) => {
        const check = () => {
          for (const line of out.split('\n')) {
            const match = pattern.exec(line);
            if (match) {
              waiters.delete(check);
              return resolve(match);
            }
          }
          if (done || child.exitCode !== null || child.signalCode !== null) {
            waiters.delete(check);
            reject(new Error(`${path.basename(args[0] ?? command)} exited before printing ${pattern}\nstdout:\n${out}\nstderr:\n${err}`));
          }
        };
        waiters.add(check);
        check();
      });
    },
    async stop(signal = 'SIGTERM') {
      if (!done) child.kill(signal);
      return exited;
    },
  };
}

/** Runs a command to completion. */
export async function runToEnd(command: string, args: string[], env: Record<string, string | undefined>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd: repoRoot, env: { ...process.env, ...env } as NodeJS.ProcessEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  return { code, stdout, stderr };
}

/** Environment for a control-plane process of its own: embedded database and in-process store unless given. */
export function embeddedEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string | undefined> {
  return {
    DATA_DIR: dataDir,
    // The control channel on a free port: processes of parallel test files would collide on 8081.
    GRPC_PORT: '0',
    DATABASE_URL: '',
    REDIS_URL: '',
    PUBLIC_URL: '',
    NODE_ENV: 'development',
    LOG_LEVEL: 'info',
    ...extra,
  };
}

/**
 * Starts `node control-plane/src/main.ts` with the Node flags `npm run control-plane` gives it (the young
 * generation's cap, unless `nodeFlags` says otherwise) and waits until it listens; returns its URL.
 */
export async function startControlPlaneProcess(t: Teardown, env: Record<string, string | undefined>, nodeFlags: string[] = [YOUNG_GENERATION_FLAG]): Promise<RunningProcess & { url: string }> {
  const proc = startProcess(t, process.execPath, [...nodeFlags, 'control-plane/src/main.ts'], { PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ...env });
  const listening = await proc.waitForLine(/"url":"(http:\/\/[^"]+)".*"msg":"control plane listening"/);
  return Object.assign(proc, { url: listening[1]!.replace('localhost', '127.0.0.1') });
}
