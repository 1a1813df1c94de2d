// The embedded database has one owner (DESIGN.md §3): these tests run the real
// control-plane process on its own data directory, with the real CLIs beside it.
import t from 'tap';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DataDirBusyError, lockDataDir } from './data-dir-lock.ts';
import { embeddedEnv, runToEnd, startControlPlaneProcess } from '../../../test/support/processes.ts';

async function tempDataDir(t: { teardown(fn: () => unknown): void }): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-owner-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

const cli = (name: 'admin' | 'migrate') => (name === 'admin' ? 'control-plane/src/cli/admin-create.ts' : 'control-plane/src/db/migrate-cli.ts');

t.test('the data directory lock: a second holder is refused with the holder named; release frees it', async (t) => {
  const dir = await tempDataDir(t);
  const lockPath = path.join(dir, 'pg.lock');
  const first = lockDataDir(lockPath, 'control-plane');
  const refused = t.throws(() => lockDataDir(lockPath, 'admin:create')) as DataDirBusyError;
  t.ok(refused instanceof DataDirBusyError);
  t.match(refused.holder, { pid: process.pid, role: 'control-plane' });
  first.release();
  const second = lockDataDir(lockPath, 'admin:create');
  second.release();
});

t.test('admin:create while the control plane runs goes through it: the admin logs in, and the CLI prints the server\'s real URL', async (t) => {
  const dataDir = await tempDataDir(t);
  const env = embeddedEnv(dataDir);
  const cp = await startControlPlaneProcess(t, env);

  // The first start on a fresh data directory created a superadmin and printed it once, on stdout.
  const email = /^ {2}e-mail: {3}(\S+)$/m.exec(cp.stdout())?.[1];
  const password = /^ {2}password: (\S+)$/m.exec(cp.stdout())?.[1];
  t.equal(email, 'admin@example.com');
  t.ok(password, 'the generated password is printed');
  t.equal(cp.stdout().split(password!).length, 2, 'the password appears once, in the credentials block, never in a log line');
  t.equal((await post(`${cp.url}/v1/auth/login`, { email, password })).status, 200, 'the first superadmin logs in');
  t.notMatch(cp.stdout(), /young generation/, 'started as npm run control-plane starts it: no warning about the heap');

  const ready = await (await fetch(`${cp.url}/v1/cdn/health/ready`)).json() as { components: unknown };
  t.match(ready.components, { postgresql: { status: 'ok', backend: 'embedded' }, redis: { status: 'ok', backend: 'in-process' } }, 'readiness names what it runs on');

  // The CLI has no PORT: what it prints comes from the running server.
  const created = await runToEnd(process.execPath, [cli('admin'), '--email', 'Boss@Example.com', '--data-dir', dataDir], { ...env, PORT: '' });
  t.equal(created.code, 0, created.stderr);
  t.match(created.stdout, /^Created boss@example\.com \(superadmin\)\.$/m);
  const generated = /Generated password[^:]*: (\S+)/.exec(created.stdout)?.[1];
  t.ok(generated);
  t.match(created.stdout, `Log in: POST ${cp.url.replace('127.0.0.1', 'localhost')}/v1/auth/login`, 'the URL of the server that ran it');
  const login = await post(`${cp.url}/v1/auth/login`, { email: 'boss@example.com', password: generated });
  t.equal(login.status, 200, 'the admin created while the server runs can log in');
  t.notOk(cp.stdout().includes(generated!), 'the server never logs the password it generated for the CLI');

  const bad = await runToEnd(process.execPath, [cli('admin'), '--email', 'x@example.com', '--role', 'god', '--data-dir', dataDir], env);
  t.equal(bad.code, 1);
  t.match(bad.stderr, /--role/);

  const migrate = await runToEnd(process.execPath, [cli('migrate'), '--data-dir', dataDir], env);
  t.equal(migrate.code, 0, migrate.stderr);
  t.match(migrate.stdout, /No pending migrations\./);

  const second = await runToEnd(process.execPath, ['control-plane/src/main.ts'], { ...env, PORT: '0' });
  t.equal(second.code, 1);
  t.match(second.stderr, new RegExp(`in use by another control-plane \\(pid ${cp.pid}\\)`));
  t.equal(second.stderr.trim().split('\n').length, 1, 'one line');

  t.same(await cp.stop(), { code: 0, signal: null }, 'SIGTERM stops it cleanly');

  // A restart prints no credentials, and the admin made through the socket is still there.
  // Started as plain `node control-plane/src/main.ts` this time: it says, once it listens, that the young generation is not capped.
  const again = await startControlPlaneProcess(t, env, []);
  t.notMatch(again.stdout(), /First superadmin|password/);
  await again.waitForLine(/"msg":"started without a cap on the young generation/);
  t.equal((await post(`${again.url}/v1/auth/login`, { email: 'boss@example.com', password: generated })).status, 200);
  await again.stop();

  // With nobody holding the directory, the CLI opens it itself.
  const alone = await runToEnd(process.execPath, [cli('admin'), '--email', 'solo@example.com', '--password', 'Solo-Pass-123', '--data-dir', dataDir], env);
  t.equal(alone.code, 0, alone.stderr);
  t.match(alone.stdout, /Created solo@example\.com/);
});

t.test('a damaged data directory gives one line saying what is wrong and what to do', async (t) => {
  const dataDir = await tempDataDir(t);
  // A Postgres directory whose files are missing: what a half-finished copy or a crash during initialisation leaves.
  await fs.mkdir(path.join(dataDir, 'pg'), { recursive: true });
  await fs.writeFile(path.join(dataDir, 'pg', 'PG_VERSION'), '17\n');
  const env = embeddedEnv(dataDir);
  for (const [name, args] of [['control-plane', ['control-plane/src/main.ts']], ['admin:create', [cli('admin'), '--email', 'a@example.com']], ['migrate', [cli('migrate')]]] as const) {
    const res = await runToEnd(process.execPath, [...args], { ...env, PORT: '0' });
    t.equal(res.code, 1, name);
    const lines = res.stderr.trim().split('\n');
    t.equal(lines.length, 1, `${name}: one line, no stack trace: ${res.stderr}`);
    t.match(lines[0], new RegExp(`^${name}: the embedded database in .*pg is damaged .* move it aside .*mv `));
    t.equal(res.stdout, '', `${name}: nothing else`);
  }
});
