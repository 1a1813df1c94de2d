// `npm start` as a newcomer runs it: flags through npm, a fresh data
// directory, every URL and command it prints tried as printed (the edge agent
// connected over the control channel: the demo endpoint's cache, over HTTPS too, the edge
// nodes list), the e-mailed verification link opened, and SIGTERM to the npm
// process stopping everything; then a second start on the same directory
// after the agent's token was revoked (the demo endpoint reused, a new token).
import t from 'tap';
import fs from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { lockDataDir } from '../control-plane/src/db/data-dir-lock.ts';
import { waitForMessage } from '../control-plane/src/mail/outbox.ts';
import { openPage } from '../test/support/pages.ts';
import { embeddedEnv, runToEnd, startProcess } from '../test/support/processes.ts';

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The parts of one of the printed curl commands. */
function parseCurl(command: string): { method: string; url: string; headers: Record<string, string>; body?: string } {
  const words = [...command.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
  const headers: Record<string, string> = {};
  let method = 'GET';
  let url = '';
  let body: string | undefined;
  for (let i = 1; i < words.length; i++) {
    const word = words[i]!;
    if (word === '-X') method = words[++i]!;
    else if (word === '-H') {
      const [name, ...value] = words[++i]!.split(':');
      headers[name!.toLowerCase()] = value.join(':').trim();
    } else if (word === '-d') body = words[++i];
    else if (word === '-sI' || word === '-I') method = 'HEAD';
    else if (word.startsWith('http')) url = word;
  }
  return { method, url, headers, body };
}

/** http.request rather than fetch: a Host header is sent as given. */
function request(spec: { method: string; url: string; headers: Record<string, string>; body?: string }): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(spec.url.replace('//localhost:', '//127.0.0.1:'));
    const req = http.request(url, { method: spec.method, headers: spec.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(spec.body);
  });
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => { socket.destroy(); resolve(false); });
    socket.once('error', () => resolve(true));
  });
}

t.test('npm start with flags on a fresh data directory: every printed URL and command works, the verify link too, and SIGTERM to npm stops every child', async (t) => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'sp-start-'));
  t.teardown(() => fs.rm(dataDir, { recursive: true, force: true }));
  const [port, agentPort, metricsPort, grpcPort, httpsPort] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()];
  const env = { ...embeddedEnv(dataDir), DATA_DIR: '', LOG_LEVEL: '' };
  const args = ['start', '--', '--port', String(port), '--http-port', String(agentPort), '--metrics-port', String(metricsPort), '--grpc-port', String(grpcPort), '--https-port', String(httpsPort), '--data-dir', dataDir];
  const start = startProcess(t, 'npm', args, env);
  await start.waitForLine(/^Ctrl-C stops both processes\.$/);
  const printed = start.stdout().slice(start.stdout().indexOf('Ready.'));
  t.match(printed, `http://localhost:${port}/docs`, 'the --port flag reached the control plane');
  t.match(printed, `grpc://127.0.0.1:${grpcPort}`, 'the --grpc-port flag reached the control plane');
  const tokenFile = path.join(dataDir, 'agent', 'agent-token');
  t.equal((await fs.stat(tokenFile)).mode & 0o777, 0o600, 'the agent token is kept readable by its owner only');
  const hostname = /-H 'Host: (\S+)'/.exec(printed)![1]!;
  t.match(hostname, /^[a-z][a-z2-7]{15}\.cdn\.localhost$/, 'the demo endpoint has a generated CDN hostname');

  // Every URL printed answers (the demo endpoint's host resolves to loopback, as *.localhost does in browsers).
  // (URLs on curl lines are tried below, with the command's own headers.)
  const plain = printed.split('\n').filter((line) => !line.includes('curl ')).join('\n');
  const urls = [...new Set([...plain.matchAll(/https?:\/\/[^\s'"()]+/g)].map((m) => m[0].replace(/[.,]$/, '')))];
  t.ok(urls.length >= 8, `${urls.length} URLs printed`);
  for (const url of urls) {
    const target = new URL(url);
    const host: Record<string, string> = target.hostname.endsWith('.localhost') ? { host: `${target.hostname}:${target.port}` } : {};
    const res = await request({ method: 'GET', url: url.replace(target.hostname, '127.0.0.1'), headers: host });
    t.equal(res.status, 200, `${url} answers`);
  }

  // The cache demo, as printed: MISS then HIT.
  const demo = parseCurl(/curl -sI .*\.css/.exec(printed)![0]);
  t.equal((await request(demo)).headers['x-cache-status'], 'MISS');
  t.equal((await request(demo)).headers['x-cache-status'], 'HIT');

  // The demo endpoint over HTTPS, as printed: the certificate (*.cdn.localhost from the internal CA) verified against the printed CA file.
  const httpsLine = /Over HTTPS\s+(curl .*)/.exec(printed)![1]!;
  const caFile = /--cacert (\S+)/.exec(httpsLine)![1]!;
  const httpsUrl = new URL(/https:\/\/\S+/.exec(httpsLine)![0]);
  t.equal(httpsUrl.port, String(httpsPort), 'the --https-port flag reached the agent');
  const overTls = await new Promise<{ status: number; cache: unknown; authorized: boolean }>((resolve, reject) => {
    https.request(httpsUrl, {
      method: 'HEAD', ca: readFileSync(caFile), lookup: (_h, _o, cb: (e: null, a: { address: string; family: number }[]) => void) => cb(null, [{ address: '127.0.0.1', family: 4 }]),
    }, (res) => {
      res.resume();
      resolve({ status: res.statusCode!, cache: res.headers['x-cache-status'], authorized: (res.socket as import('node:tls').TLSSocket).authorized });
    }).on('error', reject).end();
  });
  t.same({ status: overTls.status, authorized: overTls.authorized }, { status: 200, authorized: true }, 'served over HTTPS, the certificate trusted through the printed CA');
  t.match(overTls.cache, /^(MISS|HIT)$/, 'through the edge cache');

  // The first superadmin's credentials, and the printed login command works with them.
  const email = /^\s+e-mail\s+(\S+)$/m.exec(printed)?.[1];
  const password = /^\s+password\s+(\S+)$/m.exec(printed)?.[1];
  t.equal(email, 'admin@example.com');
  t.ok(password);
  const loginCommand = parseCurl(/curl -s -X POST \S+\/v1\/auth\/login .*/.exec(printed)![0]);
  t.match(loginCommand.body, password!);
  t.equal((await request(loginCommand)).status, 200, 'the printed login command logs in');

  // The edge nodes, as printed (two shell lines): the agent is online with the active configuration.
  const edgeNodesLines = /Edge nodes\s+(TOKEN=.*)\n\s+(curl .*)/.exec(printed)!;
  const nodes = await runToEnd('sh', ['-c', `${edgeNodesLines[1]}\n${edgeNodesLines[2]}`], env);
  t.equal(nodes.code, 0, nodes.stderr);
  const listed = JSON.parse(nodes.stdout) as { data: { status: string; config_synced: boolean }[] };
  t.match(listed.data, [{ status: 'online', config_synced: true }], 'the agent is connected and has the configuration');
  t.equal(listed.data.length, 1);

  // Register as printed, then open the e-mailed verification link and confirm through the page.
  const registerCommand = parseCurl(/curl -s -X POST \S+\/v1\/auth\/register[^\n]*\\\n[^\n]*/.exec(printed)![0].replace(/\\\n/, ' '));
  t.equal((await request(registerCommand)).status, 201, 'the printed register command registers');
  const outbox = /e-mail is written to (\S+);/.exec(printed)![1]!;
  const message = await waitForMessage(outbox, { to: JSON.parse(registerCommand.body!).email, subject: /^Confirm your e-mail address/ });
  const link = message.links.find((l) => l.includes('/verify-email?token='))!;
  t.match(link, `http://localhost:${port}/verify-email?token=`, 'the link points at this control plane');
  const linksFile = /its link is the last one in (\S+):/.exec(printed)![1]!;
  t.equal((await fs.readFile(linksFile, 'utf8')).trimEnd().split('\n').at(-1), link, 'the printed links file ends with the link');
  const page = await openPage(link.replace('//localhost:', '//127.0.0.1:'));
  t.equal(page.status, 200);
  // The page asks for the password chosen at registration (the API takes the token alone too; given, the password is checked).
  page.fill('password', JSON.parse(registerCommand.body!).password);
  await page.submit();
  t.equal(page.message().kind, 'ok', page.message().text);

  // The printed admin command, run as printed while everything runs.
  const adminCommand = /npm run admin:create -- .*/.exec(printed)![0];
  const admin = await runToEnd('sh', ['-c', adminCommand], env);
  t.equal(admin.code, 0, admin.stderr);
  t.match(admin.stdout, `Log in: POST http://localhost:${port}/v1/auth/login`);

  // SIGTERM to the npm process (not the terminal's process group) stops both children.
  const exit = await start.stop('SIGTERM');
  t.ok(exit.code === 0 || exit.signal === 'SIGTERM', `npm exited (${JSON.stringify(exit)})`);
  t.ok(await refused(port), 'the control plane is gone');
  t.ok(await refused(metricsPort), 'the edge agent is gone');
  const lock = lockDataDir(path.join(dataDir, 'pg.lock'), 'test');
  lock.release();
  t.pass('nobody holds the data directory any more');

  // The agent's token revoked while stopped: the next start issues a new one and reuses the demo endpoint.
  const tokenBefore = await fs.readFile(tokenFile, 'utf8');
  const listBefore = await runToEnd('npm', ['run', 'agent-token', '--', 'list', '--data-dir', dataDir], env);
  const tokenId = /^(\S+)\s+npm start\s+active/m.exec(listBefore.stdout)![1]!;
  const revoke = await runToEnd('npm', ['run', 'agent-token', '--', 'revoke', tokenId, '--data-dir', dataDir], env);
  t.equal(revoke.code, 0, revoke.stderr);
  const again = startProcess(t, 'npm', args, env);
  await again.waitForLine(/^Ctrl-C stops both processes\.$/);
  const second = again.stdout();
  t.match(second, 'refused the agent token', 'the refusal is noticed');
  t.match(second, /agent-token, issued now\)/);
  t.not(await fs.readFile(tokenFile, 'utf8'), tokenBefore, 'the token file holds the new token');
  t.notMatch(second, 'First superadmin', 'no second superadmin');
  t.match(second, `-H 'Host: ${hostname}'`, 'the same demo endpoint');
  const demoAgain = parseCurl(/curl -sI .*\.css/.exec(second)![0]);
  t.equal((await request(demoAgain)).status, 200);
  t.equal((await request(demoAgain)).headers['x-cache-status'], 'HIT');
  const login = await request(loginCommand);
  const bearer = { authorization: `Bearer ${JSON.parse(login.body).data.access_token}` };
  const endpoints = await request({ method: 'GET', url: `http://127.0.0.1:${port}/v1/cdn/endpoints?limit=100`, headers: bearer });
  t.equal(JSON.parse(endpoints.body).data.filter((e: { name: string }) => e.name === 'demo').length, 1, 'one demo endpoint after two starts');
  const listAfter = await runToEnd('npm', ['run', 'agent-token', '--', 'list', '--data-dir', dataDir], env);
  t.equal([...listAfter.stdout.matchAll(/npm start\s+active/g)].length, 1, 'one active token');
  const exitAgain = await again.stop('SIGTERM');
  t.ok(exitAgain.code === 0 || exitAgain.signal === 'SIGTERM', `npm exited (${JSON.stringify(exitAgain)})`);
});

t.test('npm start refuses an unknown flag or a bad value with one line', async (t) => {
  for (const [args, pattern] of [[['--prot', '9000'], /unknown flag --prot/], [['--port', 'eighty'], /^npm start: PORT: /]] as const) {
    const res = await runToEnd(process.execPath, ['scripts/dev.ts', ...args], {});
    t.equal(res.code, 1);
    t.match(res.stderr, pattern);
    t.equal(res.stderr.trim().split('\n').length, 1);
  }
});
