import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createTestDatabase } from '../../../test/support/database.ts';
import { detectServices } from '../../../test/support/services.ts';
import { verifyPassword } from '../auth/primitives/password.ts';
import { controlPlaneApplicationName } from '../db/control-plane-presence.ts';
import { openDatabase } from '../db/orm.ts';

const services = await detectServices();
const cli = path.resolve(import.meta.dirname, 'admin-create.ts');
const needsPostgres = { skip: services.postgresUrl ? false : 'needs a real PostgreSQL' };

/** A database and data directory of the test's own, and the CLI run against them (not PORT or PUBLIC_URL of the test's environment). */
async function cliOnOwnDatabase(t: Test) {
  const database = await createTestDatabase({ postgresUrl: services.postgresUrl });
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-cli-'));
  t.teardown(async () => {
    await database.dispose();
    await fs.rm(dataDir, { recursive: true, force: true });
  });
  const { PORT: _port, PUBLIC_URL: _url, ...env } = process.env;
  const run = (args: string[]) => new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], { env: { ...env, DATABASE_URL: database.url, DATA_DIR: dataDir, LOG_LEVEL: 'silent', NODE_ENV: 'test' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  const conn = () => database.db.orm.em.fork().getConnection();
  return { database, dataDir, run, conn };
}

t.test('admin:create creates a verified superadmin with the printed password, grants on re-run, refuses bad arguments', needsPostgres, async (t) => {
  const { run, conn } = await cliOnOwnDatabase(t);

  const created = await run(['--email', 'Root@Example.com', '--display-name', 'Root']);
  t.equal(created.code, 0, created.stderr);
  const generated = /Generated password[^:]*: (\S+)/.exec(created.stdout)?.[1];
  t.ok(generated, 'a generated password is printed once');
  const [user] = await conn().execute(`select id, email, status, email_verified, password_hash, display_name from app_user where email = 'root@example.com'`);
  t.match(user, { status: 'active', email_verified: true, display_name: 'Root' });
  t.ok(await verifyPassword(user.password_hash, generated!), 'the printed password is the stored one');
  const roles = (await conn().execute('select role_name from user_role where user_id = ? order by role_name', [user.id])).map((r) => r.role_name as string);
  t.same(roles, ['subscriber', 'superadmin']);

  const again = await run(['--email', 'root@example.com', '--password', 'Chosen-Pass-123']);
  t.equal(again.code, 0, again.stderr);
  t.match(again.stdout, /exists/);
  t.equal((await conn().execute(`select count(*)::int as n from app_user where email = 'root@example.com'`))[0].n, 1, 'no duplicate account');
  const [updated] = await conn().execute(`select password_hash from app_user where id = ?`, [user.id]);
  t.ok(await verifyPassword(updated.password_hash, 'Chosen-Pass-123'), 'the given password is set');

  for (const [args, message] of [
    [[], /--email/],
    [['--email', 'not-an-address'], /--email/],
    [['--email', 'x@example.com', '--password', 'weak'], /--password/],
    [['--email', 'x@example.com', '--role', 'god'], /--role/],
  ] as const) {
    const res = await run([...args]);
    t.equal(res.code, 1, args.join(' '));
    t.match(res.stderr, message);
  }
  t.equal((await conn().execute(`select count(*)::int as n from app_user where email = 'x@example.com'`))[0].n, 0, 'refused runs create nothing');
});

t.test('regression: admin:create printed a login URL on port 8080 whatever port the running control plane used; it prints the connected one\'s', needsPostgres, async (t) => {
  const { database, dataDir, run } = await cliOnOwnDatabase(t);

  const alone = await run(['--email', 'nobody-running@example.com']);
  t.equal(alone.code, 0, alone.stderr);
  t.match(alone.stdout, /Log in: POST http:\/\/localhost:8080\/v1\/auth\/login .*no control plane is connected to this database now/, 'nothing runs: the address this configuration gives it, and says so');

  // A control plane on port 9123 names its connections with its address, as main.ts does (control-plane-presence.ts).
  const running = await openDatabase({ databaseUrl: database.url, dataDir, migrate: false, applicationName: controlPlaneApplicationName('http://localhost:9123') });
  t.teardown(() => running.close());
  await running.ping();
  const found = await run(['--email', 'running@example.com']);
  t.equal(found.code, 0, found.stderr);
  t.match(found.stdout, /Log in: POST http:\/\/localhost:9123\/v1\/auth\/login with/);
  t.notMatch(found.stdout, /8080|no control plane/);
});

t.test('regression: admin:create granted a role to an account someone registered and never confirmed (pre-hijacking); it refuses', needsPostgres, async (t) => {
  const { run, conn } = await cliOnOwnDatabase(t);
  await conn().execute(`insert into app_user (id, email, password_hash, status, email_verified, notification_preferences, created_at, updated_at, version)
    values (gen_random_uuid(), 'squatted@example.com', 'x', 'pending_verification', false, '{}'::jsonb, now(), now(), 1)`);
  const res = await run(['--email', 'squatted@example.com', '--password', 'Chosen-Pass-123']);
  t.equal(res.code, 1);
  t.match(res.stderr, /not confirmed the address or set a password/);
  t.same(await conn().execute(`select r.role_name from user_role r join app_user u on u.id = r.user_id where u.email = 'squatted@example.com'`), [], 'no role granted');
  const [row] = await conn().execute(`select password_hash from app_user where email = 'squatted@example.com'`);
  t.equal(row.password_hash, 'x', 'nothing changed');
});

t.test('admin:create refuses an account confirmed with the link alone, whose password nobody showed its owner chose', needsPostgres, async (t) => {
  const { run, conn } = await cliOnOwnDatabase(t);
  await conn().execute(`insert into app_user (id, email, password_hash, status, email_verified, password_confirmed, notification_preferences, created_at, updated_at, version)
    values (gen_random_uuid(), 'link-only@example.com', 'x', 'active', true, false, '{}'::jsonb, now(), now(), 1)`);
  const res = await run(['--email', 'link-only@example.com']);
  t.equal(res.code, 1);
  t.match(res.stderr, /Invite it as a CDN admin user instead/);
  t.same(await conn().execute(`select r.role_name from user_role r join app_user u on u.id = r.user_id where u.email = 'link-only@example.com'`), [], 'no role granted');
  await conn().execute(`update app_user set password_confirmed = true where email = 'link-only@example.com'`);
  t.equal((await run(['--email', 'link-only@example.com'])).code, 0, 'once the owner confirmed the password, the role is granted');
});
