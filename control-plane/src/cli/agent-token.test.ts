// `npm run agent-token`: the real CLI process against the test control
// plane's PostgreSQL database and data directory (so it derives the same
// token pepper) and the real Redis, in the namespace of the database's
// deployment: create prints the value once and the control plane's verifier
// accepts it; list never shows a value; revoke and rotate announce the token
// on the revocation channel; bad arguments exit 1 and store nothing.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { countRows, query } from '../../../test/support/auth.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { embeddedEnv, runToEnd, startControlPlaneProcess } from '../../../test/support/processes.ts';
import { detectServices } from '../../../test/support/services.ts';
import { AGENT_TOKEN_REVOKED_CHANNEL } from '../edge-channel/index.ts';
import { deploymentNamespace } from '../db/deployment.ts';
import { createStore, namespacePrefix } from '../store/index.ts';

const services = await detectServices();
const cli = path.resolve(import.meta.dirname, 'agent-token.ts');

t.test('agent-token create, list, revoke and rotate; bad arguments refused', { skip: services.postgresUrl && services.redisUrl ? false : 'needs a real PostgreSQL and Redis' }, async (t) => {
  const cp = await startTestControlPlane(t);
  // The CLI publishes in the deployment's namespace (the database's deployment id), where its control planes subscribe.
  const store = createStore(services.redisUrl, namespacePrefix(await deploymentNamespace({}, cp.database.db)));
  t.teardown(() => store.close());
  const announced: string[] = [];
  t.teardown(await store.subscribe(AGENT_TOKEN_REVOKED_CHANNEL, (message) => { announced.push(message); }));
  const announcedIds = () => announced.map((m) => (JSON.parse(m) as { id: string }).id);

  const run = (args: string[], env: Record<string, string> = {}) => new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], {
      env: { ...process.env, DATABASE_URL: cp.database.url, DATA_DIR: cp.config.dataDir, REDIS_URL: services.redisUrl!, LOG_LEVEL: 'silent', NODE_ENV: 'test', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
  const verify = (value: string) => cp.app.edgeAgentTokens.verify(value);
  const row = async (id: string) => (await query<Record<string, any>>(cp, 'select * from cdn_agent_token where id = ?', [id]))[0];
  const VALUE = /(agt_[A-Za-z0-9_-]{43})/;

  const created = await run(['create', '--name', 'edge-cli-1', '--description', 'made by the CLI']);
  t.equal(created.code, 0, created.stderr);
  const value = VALUE.exec(created.stdout)?.[1];
  t.ok(value, 'the value is printed');
  t.equal(created.stdout.split(value!).length, 2, 'once');
  const id = /Created agent token ([0-9a-f-]{36}) \(edge-cli-1\), never expires\./.exec(created.stdout)?.[1];
  t.ok(id, 'the id is printed');
  t.same(await verify(value!), { id }, 'the control plane accepts the value the CLI printed (same pepper)');
  t.match(await row(id!), { name: 'edge-cli-1', description: 'made by the CLI', status: 'active', created_by: null, token_hint: `${value!.slice(0, 8)}…` });
  const [audit] = await query<Record<string, any>>(cp, `select action, actor_type, request_id, metadata from audit_log where resource_id = ?`, [id]);
  t.match(audit, { action: 'agent_token.created', actor_type: 'system', request_id: /^cli-/ });
  t.notOk(JSON.stringify(audit).includes(value!.slice(4)), 'the value is not in the audit entry');

  const expires = new Date(Date.now() + 86_400_000).toISOString();
  const second = await run(['create', `--name=edge-cli-2`, '--expires-at', expires]);
  t.equal(second.code, 0, second.stderr);
  t.match(second.stdout, `expires ${expires}`);
  const secondValue = VALUE.exec(second.stdout)![1]!;
  const secondId = (await verify(secondValue))!.id;

  const list = await run(['list']);
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, /^ID\s+NAME\s+STATUS\s+TOKEN\s+EXPIRES\s+LAST USED$/m);
  t.match(list.stdout, new RegExp(`^${id}\\s+edge-cli-1\\s+active\\s+${value!.slice(0, 8)}…`, 'm'));
  t.match(list.stdout, new RegExp(`^${secondId}\\s+edge-cli-2\\s+active\\s+\\S+\\s+${expires}`, 'm'));
  t.notOk(list.stdout.includes(value!.slice(8)), 'no value listed');
  t.notOk(list.stdout.includes(secondValue.slice(8)), 'no value listed');

  const revoked = await run(['revoke', id!]);
  t.equal(revoked.code, 0, revoked.stderr);
  t.match(revoked.stdout, `Revoked agent token ${id} (edge-cli-1).`);
  t.match(revoked.stdout, /Control planes were told/);
  await eventually(() => announcedIds().includes(id!), 'the revocation is announced on Redis');
  t.equal(await verify(value!), null, 'refused once revoked');
  t.equal((await row(id!))!.status, 'revoked');
  const onlyRevoked = await run(['list', '--status', 'revoked']);
  t.match(onlyRevoked.stdout, id!);
  t.notMatch(onlyRevoked.stdout, secondId);

  const rotated = await run(['rotate', secondId]);
  t.equal(rotated.code, 0, rotated.stderr);
  const newValue = VALUE.exec(rotated.stdout)?.[1];
  t.ok(newValue);
  t.equal(await verify(secondValue), null, 'the old value is refused');
  const newId = (await verify(newValue!))?.id;
  t.ok(newId, 'the new value is accepted');
  t.match(await row(secondId), { status: 'revoked', replaced_by: newId });
  await eventually(() => announcedIds().includes(secondId), 'the rotated token is announced');

  // Without Redis the CLI cannot reach running control planes, and says so.
  const quiet = await run(['create', '--name', 'edge-cli-3']);
  const quietId = (await verify(VALUE.exec(quiet.stdout)![1]!))!.id;
  const noRedis = await run(['revoke', quietId], { REDIS_URL: '' });
  t.equal(noRedis.code, 0, noRedis.stderr);
  t.match(noRedis.stdout, /No REDIS_URL/);
  t.equal((await row(quietId))!.status, 'revoked');

  const tokensBefore = await countRows(cp, 'cdn_agent_token');
  const auditBefore = await countRows(cp, 'audit_log');
  const stateBefore = await query(cp, 'select * from cdn_agent_token order by id');
  for (const [args, message] of [
    [[], /an action is required/],
    [['destroy'], /unknown action/],
    [['create'], /--name is required/],
    [['create', '--name', ''], /--name/],
    [['create', '--name', 'x'.repeat(101)], /--name/],
    [['create', '--name', 'ok', '--expires-at', 'tomorrow'], /--expires-at/],
    [['create', '--name', 'ok', '--expires-at', '2001-01-01T00:00:00Z'], /--expires-at: Must be in the future/],
    [['create', '--name'], /--name needs a value/],
    [['create', '--name', 'ok', '--status', 'revoked'], /unknown flag --status/],
    [['list', '--status', 'expired'], /--status/],
    [['revoke'], /revoke needs the token's id/],
    [['revoke', 'not-a-uuid'], /the id: Must be a UUID/],
    [['revoke', crypto.randomUUID()], /Agent token not found/],
    [['revoke', id!], /revoked/],
    [['rotate', id!], /revoked/],
  ] as const) {
    const res = await run([...args]);
    t.equal(res.code, 1, `${args.join(' ')}: exit 1`);
    t.match(res.stderr, message, args.join(' '));
  }
  t.equal(await countRows(cp, 'cdn_agent_token'), tokensBefore, 'refused runs store no token');
  t.same(await query(cp, 'select * from cdn_agent_token order by id'), stateBefore, 'and change none');
  t.equal(await countRows(cp, 'audit_log'), auditBefore, 'nor write the audit trail');
});

t.test('agent-token create refuses, with one line, to mint a token without the deployment\'s secrets key; revoke still works', { skip: services.postgresUrl ? false : 'needs a real PostgreSQL' }, async (t) => {
  const cp = await startTestControlPlane(t);
  const elsewhere = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-agt-nokey-'));
  t.teardown(() => fs.rm(elsewhere, { recursive: true, force: true }));
  const run = (args: string[], extra: Record<string, string>) =>
    runToEnd(process.execPath, [cli, ...args], { SECRETS_KEY: undefined, REDIS_URL: undefined, DATABASE_URL: cp.database.url, LOG_LEVEL: 'silent', NODE_ENV: 'test', ...extra });
  const tokensBefore = await countRows(cp, 'cdn_agent_token');
  const auditBefore = await countRows(cp, 'audit_log');

  for (const [what, extra, message] of [
    ['no SECRETS_KEY and a data directory without the key', { DATA_DIR: elsewhere }, /^agent-token: this database's control planes seal their secrets with a key this command does not have \(no SECRETS_KEY, no .*secrets\.key\): run it with their SECRETS_KEY, or with --data-dir naming their data directory\n$/],
    ['another SECRETS_KEY', { DATA_DIR: elsewhere, SECRETS_KEY: randomBytes(32).toString('hex') }, /^agent-token: the secrets key this command has \(SECRETS_KEY\) is not the one this database's control planes use: run it with their SECRETS_KEY, or with --data-dir naming their data directory\n$/],
  ] as const) {
    for (const args of [['create', '--name', 'dead-token'], ['rotate', crypto.randomUUID()]]) {
      const res = await run(args, extra);
      t.equal(res.code, 1, `${what}, ${args[0]}: exit 1`);
      t.match(res.stderr, message, `${what}, ${args[0]}: one line`);
      t.notMatch(res.stdout, /agt_/, 'no token printed');
    }
  }
  await t.rejects(fs.access(path.join(elsewhere, 'secrets.key')), 'no key of its own was made up');
  t.equal(await countRows(cp, 'cdn_agent_token'), tokensBefore, 'no token stored');
  t.equal(await countRows(cp, 'audit_log'), auditBefore, 'nothing audited');

  // With the control plane's data directory (its dev key) it mints a token the control plane accepts; revoking needs no key.
  const created = await run(['create', '--name', 'live-token'], { DATA_DIR: cp.config.dataDir });
  t.equal(created.code, 0, created.stderr);
  const value = /(agt_[A-Za-z0-9_-]{43})/.exec(created.stdout)![1]!;
  const verified = await cp.app.edgeAgentTokens.verify(value);
  t.ok(verified, 'the control plane accepts it');
  const revoked = await run(['revoke', verified!.id], { DATA_DIR: elsewhere });
  t.equal(revoked.code, 0, revoked.stderr);
  t.equal(await cp.app.edgeAgentTokens.verify(value), null);
});

t.test('while a control plane holds the embedded database, agent-token runs inside it (its pepper, its store)', async (t) => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-agt-'));
  t.teardown(() => fs.rm(dataDir, { recursive: true, force: true }));
  const env = embeddedEnv(dataDir);
  const cp = await startControlPlaneProcess(t, env);
  const email = /^ {2}e-mail: {3}(\S+)$/m.exec(cp.stdout())?.[1];
  const password = /^ {2}password: (\S+)$/m.exec(cp.stdout())?.[1];
  const login = await fetch(`${cp.url}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });
  const accessToken = ((await login.json()) as { data: { access_token: string } }).data.access_token;
  const read = async (id: string) => (await fetch(`${cp.url}/v1/cdn/agent-tokens/${id}`, { headers: { authorization: `Bearer ${accessToken}` } })).json() as Promise<Record<string, any>>;

  const created = await runToEnd(process.execPath, [cli, 'create', '--name', 'edge-embedded', '--data-dir', dataDir], env);
  t.equal(created.code, 0, created.stderr);
  const value = /(agt_[A-Za-z0-9_-]{43})/.exec(created.stdout)?.[1];
  const id = /Created agent token ([0-9a-f-]{36})/.exec(created.stdout)?.[1];
  t.ok(value && id, 'the id and the value are printed');
  t.match(await read(id!), { id, name: 'edge-embedded', status: 'active', token_hint: `${value!.slice(0, 8)}…` }, 'the running server holds it');

  const revoked = await runToEnd(process.execPath, [cli, 'revoke', id!, '--data-dir', dataDir], env);
  t.equal(revoked.code, 0, revoked.stderr);
  t.match(revoked.stdout, /Control planes were told/, 'published on the owner\'s own store');
  t.match(await read(id!), { status: 'revoked' });
  t.notOk(cp.stdout().includes(value!.slice(4)), 'the server never logs the value it generated for the CLI');
  t.same(await cp.stop(), { code: 0, signal: null });
});
