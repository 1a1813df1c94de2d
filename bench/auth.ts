// Authenticated request throughput against a bare Koa route, and login latency
// (alone, and 8 at a time while an authenticated route is timed alongside).
//
// Servers run as child processes pinned to core 0, wrk to core 1 (one thread,
// 64 connections). The control plane is the real one (startControlPlane) on
// PostgreSQL and Redis when reachable, else embedded PGlite and the in-process
// store, with LOG_LEVEL=silent and RATE_LIMIT_PER_MINUTE=0. Routes measured:
//   bare        plain Koa app, GET /me answering a small JSON body
//   public      GET /v1/bench/public on the control plane: the same body through the
//               full request frame and route pipeline, without authentication
//   me-like     GET /v1/bench/me on the control plane: the same plus JWT verification
//               and the revocation check, answering from the token
//   users/me    GET /v1/users/me: the above plus the stored-permission query and a user read
//   plain pg    plain Koa route running the same two SQL queries through `pg` (PostgreSQL only)
//   API token   GET /v1/bench/cdn with a viewer's `Bearer cdn_...`: the token's resolution (cached
//               per replica) and its role's grants, against the public route sent a header of the
//               token's size (PostgreSQL only)
// The control plane carries a full-size route table (the product's routes plus
// fillers up to ROUTE_TABLE_SIZE), so route matching is measured at the size
// the finished API will have.
// Run: npx node bench/auth.ts [--duration 5] [--rounds 3] [--warmup 3] [--connections 64]
import { execFile, execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { have, numberFlag, pin } from './lib/cli.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const DURATION = numberFlag('duration', 5);
const ROUNDS = numberFlag('rounds', 3);
const WARMUP = numberFlag('warmup', 3);
const CONNECTIONS = numberFlag('connections', 64);
const BARE_PORT = 18811;
const CP_PORT = 18812;
const PASSWORD = 'Bench-Password-42';
const PG_PORT = 18813;
const ROUTE_TABLE_SIZE = 170;
const QUICK = args.includes('--quick'); // bare vs me-like only (for profiling runs)
const ACCOUNTS = QUICK ? 1 : 8;


// ---- child-process modes ----------------------------------------------------

// ---- the benchmark ----------------------------------------------------------

interface Result { rps: number; p50: number; p99: number; cpuUsPerRequest?: number }

/** CPU time (user + system, ms) a process has used so far, from /proc (Linux). */
function cpuMs(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of the whole line)
  return (ticks * 1000) / CLOCK_TICKS;
}
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

function wrkCommand(url: string, headers: Record<string, string>, seconds: number, connections: number): string[] {
  const lua = path.join(os.tmpdir(), `wrk-auth-${process.pid}-${Buffer.from(url + JSON.stringify(headers)).toString('base64url').slice(-24)}.lua`);
  fs.writeFileSync(lua, Object.entries(headers).map(([k, v]) => `wrk.headers["${k}"] = "${v}"\n`).join(''));
  return pin('1', ['wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', lua, url]);
}

/**
 * One target under load. With the server's pid, also the server's CPU time per
 * request: what a request costs, whatever else the host runs meanwhile (other
 * load slows a request down but adds little to its own CPU time).
 */
function wrk(url: string, headers: Record<string, string>, seconds: number, pid?: number): Result {
  const cmd = wrkCommand(url, headers, seconds, CONNECTIONS);
  const before = pid ? cpuMs(pid) : 0;
  const out = execFileSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8' });
  const result = parseWrk(url, out);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  if (pid && requests > 0) result.cpuUsPerRequest = ((cpuMs(pid) - before) * 1000) / requests;
  return result;
}

/**
 * Two targets loaded at the same time, each by its own wrk with half the
 * connections. Both servers are pinned to core 0, so the scheduler shares it
 * between them and the ratio of their rates is the ratio of their cost per
 * request, whatever else the host runs meanwhile (it slows both alike).
 */
async function wrkSideBySide(a: [string, Record<string, string>], b: [string, Record<string, string>], seconds: number): Promise<[Result, Result]> {
  const run = ([url, headers]: [string, Record<string, string>]) => new Promise<Result>((resolve, reject) => {
    const cmd = wrkCommand(url, headers, seconds, Math.max(1, CONNECTIONS / 2));
    execFile(cmd[0]!, cmd.slice(1), { encoding: 'utf8' }, (error, out) => (error ? reject(error) : resolve(parseWrk(url, out))));
  });
  return Promise.all([run(a), run(b)]) as Promise<[Result, Result]>;
}

function parseWrk(url: string, out: string): Result {
  if (/Non-2xx/.test(out)) throw new Error(`non-2xx responses from ${url}:\n${out}`);
  const ms = (label: string) => {
    const m = new RegExp(`\\s${label}\\s+([\\d.]+)(us|ms|s)`).exec(out);
    if (!m) return Number.NaN;
    const v = Number(m[1]);
    return m[2] === 'us' ? v / 1000 : m[2] === 's' ? v * 1000 : v;
  };
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0), p50: ms('50%'), p99: ms('99%') };
}

const children: ChildProcess[] = [];
process.on('exit', () => { for (const c of children) if (c.exitCode === null) c.kill('SIGTERM'); });
process.on('SIGINT', () => process.exit(130));

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`${url} did not come up`);
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const summary = (samples: number[]) => {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1]! };
};
const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(2));

/**
 * fetch that retries once when a pooled keep-alive socket turns out closed: the
 * server drops sockets idle past its keep-alive timeout, and the throughput part
 * leaves the bench's own sockets idle for longer than that.
 */
async function request(url: string, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (error) {
    if ((error as { cause?: { code?: string } }).cause?.code !== 'UND_ERR_SOCKET') throw error;
    return fetch(url, init);
  }
}

async function timed(fn: () => Promise<Response>): Promise<number> {
  const started = performance.now();
  const res = await fn();
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return performance.now() - started;
}

/** Sequential authenticated requests until `until` resolves; their latencies. */
async function probeWhile(url: string, token: string, until: Promise<unknown>): Promise<number[]> {
  let done = false;
  void until.finally(() => { done = true; });
  const samples: number[] = [];
  while (!done) samples.push(await timed(() => request(url, { headers: { authorization: `Bearer ${token}` } })));
  return samples;
}

async function main(): Promise<void> {
  if (!have('wrk')) {
    console.log('installing wrk from Debian packages...');
    execFileSync('sh', ['-c', 'apt-get install -y -qq wrk || (apt-get update -qq && apt-get install -y -qq wrk)'], { stdio: 'inherit' });
  }
  const { detectServices } = await import('../test/support/services.ts');
  const { adminQuery, dropDatabase, withDatabaseName } = await import('../test/support/database.ts');
  const services = await detectServices();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sp-bench-auth-'));
  const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: dataDir };
  let dbName: string | undefined;
  if (services.postgresUrl) {
    dbName = `sp_bench_auth_${Date.now().toString(36)}`;
    await adminQuery(services.postgresUrl, `create database ${dbName}`);
    env.DATABASE_URL = withDatabaseName(services.postgresUrl, dbName);
  } else delete env.DATABASE_URL;
  if (services.redisUrl) env.REDIS_URL = services.redisUrl; else delete env.REDIS_URL;
  const backing = `${services.postgresUrl ? 'PostgreSQL' : 'embedded PGlite'} + ${services.redisUrl ? 'Redis' : 'in-process store'}`;

  try {
    const self = fileURLToPath(import.meta.url);
    const bareCmd = pin('0', [process.execPath, self, '--serve-bare', String(BARE_PORT)]);
    const bare = spawn(bareCmd[0]!, bareCmd.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
    children.push(bare);
    const cpCmd = pin('0', [process.execPath, ...(process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []), self, '--serve-cp']);
    const cp = spawn(cpCmd[0]!, cpCmd.slice(1), { env, stdio: ['ignore', 'ignore', 'inherit'] });
    children.push(cp);
    const base = `http://127.0.0.1:${CP_PORT}`;
    await Promise.all([waitFor(`http://127.0.0.1:${BARE_PORT}/me`), waitFor(`${base}/healthz`)]);

    // Accounts through the API: register → verification link from the outbox → verify.
    const { waitForMessage } = await import('../control-plane/src/mail/outbox.ts');
    const emails: string[] = [];
    for (let i = 0; i < ACCOUNTS; i++) {
      const email = `bench-${i}-${process.pid}@example.com`;
      const reg = await fetch(`${base}/v1/auth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD, accept_terms: true }) });
      if (reg.status !== 201) throw new Error(`register: ${reg.status} ${await reg.text()}`);
      const message = await waitForMessage(path.join(dataDir, 'outbox'), { to: email }, { timeoutMs: 10_000 });
      const token = new URL(message.links[0]!).searchParams.get('token');
      const verified = await fetch(`${base}/v1/auth/email/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token, password: PASSWORD }) });
      if (verified.status !== 200) throw new Error(`verify: ${verified.status}`);
      emails.push(email);
    }
    const login = (email: string) => request(`${base}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) });
    const first = await login(emails[0]!);
    const accessToken = ((await first.json()) as { data: { access_token: string } }).data.access_token;
    const auth = { Authorization: `Bearer ${accessToken}` };
    const benchUserId = JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString()).sub as string;
    let pgServer: ChildProcess | undefined;
    if (env.DATABASE_URL) {
      const pgCmd = pin('0', [process.execPath, self, '--serve-pg', String(PG_PORT)]);
      pgServer = spawn(pgCmd[0]!, pgCmd.slice(1), { env: { ...env, BENCH_USER_ID: benchUserId }, stdio: ['ignore', 'ignore', 'inherit'] });
      children.push(pgServer);
      await waitFor(`http://127.0.0.1:${PG_PORT}/me`);
    }

    // A viewer API token, issued by a superadmin (on PostgreSQL only: the embedded database has one owner,
    // the control plane, and there the token cache is off anyway).
    let apiToken: string | undefined;
    if (env.DATABASE_URL) {
      const { openDatabase } = await import('../control-plane/src/db/orm.ts');
      const { entities } = await import('../control-plane/src/capabilities.ts');
      const { createAdminCommand } = await import('../control-plane/src/admin/create-admin.ts');
      const db = await openDatabase({ databaseUrl: env.DATABASE_URL, dataDir, entities, migrate: false });
      const adminEmail = `bench-admin-${process.pid}@example.com`;
      await createAdminCommand.run({ db, publicUrl: '', io: { out: () => {}, err: () => {} } }, { email: adminEmail, password: PASSWORD, role: 'superadmin' });
      await db.close();
      const adminLogin = await login(adminEmail);
      const adminToken = ((await adminLogin.json()) as { data: { access_token: string } }).data.access_token;
      const created = await fetch(`${base}/v1/cdn/api-tokens`, {
        method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bench', role: 'viewer' }),
      });
      if (created.status !== 201) throw new Error(`API token: ${created.status} ${await created.text()}`);
      apiToken = ((await created.json()) as { token: string }).token;
    }

    // 1. Throughput: each target warmed up, then measured.
    const targets: [string, string, Record<string, string>, number?][] = [
      ['bare Koa route (GET /me)', `http://127.0.0.1:${BARE_PORT}/me`, {}, bare.pid],
      ['same control-plane stack, no auth (GET /v1/bench/public)', `${base}/v1/bench/public`, {}, cp.pid],
      ['me-like route (GET /v1/bench/me: JWT + revocation check)', `${base}/v1/bench/me`, auth, cp.pid],
      ['GET /v1/users/me (also stored permissions + user read)', `${base}/v1/users/me`, auth, cp.pid],
      ...(pgServer ? [['plain Koa + pg, the same two queries (GET /me)', `http://127.0.0.1:${PG_PORT}/me`, {}, pgServer.pid] as [string, string, Record<string, string>, number?]] : []),
      // The public route again, sent a header as long as the access token: the authenticated route's
      // twin in bytes, so their ratio is what authentication costs, not what a bigger request costs.
      ['public route with a token-sized header (GET /v1/bench/public)', `${base}/v1/bench/public`, { 'X-Padding': 'p'.repeat(accessToken.length) }, cp.pid],
      // A machine API token on a CDN read, and its twin in bytes.
      ...(apiToken ? [
        ['API-token route (GET /v1/bench/cdn: cdn_ token, cached resolution, role grants)', `${base}/v1/bench/cdn`, { Authorization: `Bearer ${apiToken}` }, cp.pid],
        ['public route with an API-token-sized header (GET /v1/bench/public)', `${base}/v1/bench/public`, { 'X-Padding': 'p'.repeat(apiToken.length) }, cp.pid],
      ] as [string, string, Record<string, string>, number?][] : []),
    ];
    // The host is noisy (a shared VM): targets are measured in interleaved rounds
    // and each reports its median round, so a slow spell hits every target alike.
    const chosen = QUICK ? targets.slice(0, 3) : targets;
    for (const [, url, headers] of chosen) wrk(url, headers, WARMUP);
    const rounds: Result[][] = chosen.map(() => []);
    for (let round = 0; round < ROUNDS; round++) {
      chosen.forEach(([, url, headers, pid], i) => rounds[i]!.push(wrk(url, headers, DURATION, pid)));
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const throughput: [string, Result][] = chosen.map(([name], i) => {
      const r = rounds[i]!;
      const result = { rps: median(r.map((x) => x.rps)), p50: median(r.map((x) => x.p50)), p99: median(r.map((x) => x.p99)), cpuUsPerRequest: median(r.map((x) => x.cpuUsPerRequest ?? NaN)) };
      console.log(`${name}: ${result.rps.toFixed(0)} req/s, p50 ${fmt(result.p50)} ms, p99 ${fmt(result.p99)} ms (median of ${ROUNDS} rounds: ${r.map((x) => x.rps.toFixed(0)).join(', ')} req/s)`);
      return [name, result];
    });
    const ratio = throughput[2]![1].rps / throughput[0]![1].rps;
    // Authentication's own cost: the me-like route against its twin in request size (the last target).
    const padded = throughput.find(([name]) => name.startsWith('public route with a token-sized header'));
    const authRatio = padded ? throughput[2]![1].rps / padded[1].rps : NaN;
    const stackRatio = throughput[1]![1].rps / throughput[0]![1].rps;
    if (QUICK) {
      console.log(`authenticated / same stack unauthenticated: ${((ratio / stackRatio) * 100).toFixed(0)}% (goal ≥ 70%); authenticated / plain Koa: ${(ratio * 100).toFixed(0)}%; stack without auth / plain Koa: ${(stackRatio * 100).toFixed(0)}%`);
      return;
    }
    const ratioFull = throughput[3]![1].rps / throughput[0]![1].rps;
    const pgRatio = throughput[4] ? throughput[3]![1].rps / throughput[4][1].rps : undefined;
    const p99Ratio = throughput[1]![1].p99 / throughput[0]![1].p99;
    console.log(`one at a time: authenticated / same-sized public request: ${(authRatio * 100).toFixed(0)}% (/ public without the header: ${((ratio / stackRatio) * 100).toFixed(0)}%); stack without auth / plain Koa: ${(stackRatio * 100).toFixed(0)}% (p99 ${p99Ratio.toFixed(2)}× plain Koa's); users/me / plain Koa + pg: ${pgRatio === undefined ? 'n/a (no PostgreSQL)' : `${(pgRatio * 100).toFixed(0)}%`}; users/me / plain Koa: ${(ratioFull * 100).toFixed(0)}%`);

    // 1b. The same comparisons side by side (see wrkSideBySide): the goals are read on these.
    const pairs: [string, number, number][] = [
      ['public route / plain Koa', 1, 0],
      ...(throughput[4] ? [['users/me / plain Koa + pg', 3, 4] as [string, number, number]] : []),
    ];
    const sideBySide: { name: string; ratio: number; p99: number; samples: string[] }[] = [];
    for (const [name, a, b] of pairs) {
      const ratios: number[] = [];
      const p99s: number[] = [];
      const samples: string[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const [ra, rb] = await wrkSideBySide([chosen[a]![1], chosen[a]![2]], [chosen[b]![1], chosen[b]![2]], DURATION);
        ratios.push(ra.rps / rb.rps);
        p99s.push(ra.p99 / rb.p99);
        samples.push(`${ra.rps.toFixed(0)}/${rb.rps.toFixed(0)}`);
      }
      const entry = { name, ratio: median(ratios), p99: median(p99s), samples };
      console.log(`side by side, ${name}: ${(entry.ratio * 100).toFixed(0)}% (p99 ${entry.p99.toFixed(2)}×; rounds ${samples.join(', ')} req/s)`);
      sideBySide.push(entry);
    }
    const pair = (name: string) => sideBySide.find((e) => e.name === name);
    /** Throughput one core allows target b relative to target a: the inverse ratio of their CPU per request. */
    const cpuRatio = (a: number, b: number) => {
      const ca = throughput[a]?.[1].cpuUsPerRequest;
      const cb = throughput[b]?.[1].cpuUsPerRequest;
      return ca && cb ? `${((ca / cb) * 100).toFixed(0)}%` : 'n/a';
    };
    const paddedIndex = throughput.findIndex(([name]) => name.startsWith('public route with a token-sized header'));
    const apiIndex = throughput.findIndex(([name]) => name.startsWith('API-token route'));
    const apiPaddedIndex = throughput.findIndex(([name]) => name.startsWith('public route with an API-token-sized header'));
    const apiRatio = apiIndex >= 0 && apiPaddedIndex >= 0 ? throughput[apiIndex]![1].rps / throughput[apiPaddedIndex]![1].rps : NaN;
    console.log(`by CPU per request: public / plain Koa ${cpuRatio(0, 1)}; me-like / same-sized public ${cpuRatio(paddedIndex, 2)} (/ public without the header ${cpuRatio(1, 2)}); users/me / plain Koa + pg ${throughput[4] ? cpuRatio(4, 3) : 'n/a'}`);

    // 2. Logins: the control plane may now use both cores (argon2 runs on the libuv pool).
    if (have('taskset')) spawnSync('taskset', ['-a', '-p', '-c', '0,1', String(cp.pid)], { stdio: 'ignore' });
    const meUrl = `${base}/v1/bench/me`;
    for (let i = 0; i < 200; i++) await timed(() => request(meUrl, { headers: auth })); // warm the client side
    const idle = summary(await probeWhile(meUrl, accessToken, new Promise((r) => setTimeout(r, 2000))));

    const alone: number[] = [];
    for (const email of emails) alone.push(await timed(() => login(email)));
    const LOGIN_ROUNDS = 4;
    const concurrent: number[] = [];
    const loginsDone = (async () => {
      for (let round = 0; round < LOGIN_ROUNDS; round++) {
        concurrent.push(...(await Promise.all(emails.map((email) => timed(() => login(email))))));
      }
    })();
    const during = summary(await probeWhile(meUrl, accessToken, loginsDone));
    await loginsDone;
    const a = summary(alone);
    const c = summary(concurrent);
    console.log(`login alone: p50 ${fmt(a.p50)} ms, max ${fmt(a.max)} ms (n=${a.n}); 8 concurrent: p50 ${fmt(c.p50)} ms, p99 ${fmt(c.p99)} ms (n=${c.n})`);
    console.log(`me-like latency idle: p50 ${fmt(idle.p50)} ms, p99 ${fmt(idle.p99)} ms, max ${fmt(idle.max)} ms; during 8 concurrent logins: p50 ${fmt(during.p50)} ms, p99 ${fmt(during.p99)} ms, max ${fmt(during.max)} ms (n=${during.n})`);

    const lines = [
      '# Auth benchmark',
      '',
      `Run ${new Date().toISOString()} on ${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, Node ${process.version}, ${backing}; load average at the end ${os.loadavg().map((l) => l.toFixed(1)).join(' / ')} (1/5/15 min: above 2 the host was busy with other work, and the ratios are less trustworthy).`,
      `Throughput: wrk -t1 -c${CONNECTIONS}, ${DURATION} s per target and round, ${ROUNDS} interleaved rounds (medians) after ${WARMUP} s warm-up; servers pinned to core 0, wrk to core 1. The host is noisy (±20% run to run): compare within one run.`,
      '',
      '| target | req/s | p50 ms | p99 ms | vs plain Koa | server CPU µs per request |',
      '|---|---:|---:|---:|---:|---:|',
      ...throughput.map(([name, r]) => `| ${name} | ${r.rps.toFixed(0)} | ${fmt(r.p50)} | ${fmt(r.p99)} | ${((r.rps / throughput[0]![1].rps) * 100).toFixed(0)}% | ${fmt(r.cpuUsPerRequest ?? NaN)} |`),
      '',
      `The control plane carries ${ROUTE_TABLE_SIZE} routes (the product's plus fillers), the size the finished API will have.`,
      '',
      'Ratios, same run, three ways. *By CPU*: the inverse ratio of the servers\' CPU time per request (from /proc, over the one-at-a-time runs): what one core can serve, least sensitive to what else the host runs. *Side by side*: both targets loaded at once, each by its own wrk with half the connections, both servers sharing core 0 (both wrk share core 1, so the faster server\'s load generator can become the limit, which understates its lead or inflates it). *One at a time*: from the table above, exposed to the host\'s swings between measurements.',
      '',
      '| ratio | by CPU | side by side | one at a time | goal |',
      '|---|---:|---:|---:|---:|',
      `| request frame, public route / plain Koa (req/s) | ${cpuRatio(0, 1)} | ${((pair('public route / plain Koa')?.ratio ?? NaN) * 100).toFixed(0)}% | ${(stackRatio * 100).toFixed(0)}% | ≥ 60% |`,
      `| request frame, public route p99 / plain Koa p99 | | ${(pair('public route / plain Koa')?.p99 ?? NaN).toFixed(2)}× | ${p99Ratio.toFixed(2)}× | ≤ 2× |`,
      `| authenticated (me-like) / the public route sent a header of the token's size | ${cpuRatio(paddedIndex, 2)} | — | ${(authRatio * 100).toFixed(0)}% | ≥ 90% |`,
      `| authenticated (me-like) / the public route without that header (for reference) | ${cpuRatio(1, 2)} | — | ${((ratio / stackRatio) * 100).toFixed(0)}% | |`,
      `| API token (cdn_…, resolution cached) / the public route sent a header of its size | ${apiIndex >= 0 ? cpuRatio(apiPaddedIndex, apiIndex) : 'n/a'} | — | ${apiIndex >= 0 ? `${(apiRatio * 100).toFixed(0)}%` : 'n/a (no PostgreSQL)'} | |`,
      `| GET /v1/users/me / plain Koa + pg running the same two queries | ${throughput[4] ? cpuRatio(4, 3) : 'n/a'} | ${pair('users/me / plain Koa + pg') ? `${(pair('users/me / plain Koa + pg')!.ratio * 100).toFixed(0)}%` : 'n/a'} | ${pgRatio === undefined ? 'n/a' : `${(pgRatio * 100).toFixed(0)}%`} | ≥ 80% |`,
      '',
      'Authentication is compared with the public route sent a header as long as the access token (so both requests carry the same bytes; receiving and parsing a 540-byte header costs the server about as much as checking the token, and is not authentication). Side by side does not apply to two routes of one process: its requests interleave, so their rates come out equal whatever they cost.',
      '',
      'For users/me, CPU time is only part of the cost: PostgreSQL answers both servers (one statement per request for the control plane, two for the baseline), so the by-CPU ratio says how much node-side work each does, and the throughput ratios say how they fare end to end.',
      '',
      `Side-by-side rounds (req/s, first / second): ${sideBySide.map((e) => `${e.name}: ${e.samples.join(', ')}`).join('; ')}.`,
      '',
      'GET /v1/users/me answers with one SQL statement: the guard reads the caller\'s row with its roles and grants (one JSON column) and the route presents that row; the plain baseline runs the two statements the route needed before (guard, then user read).',
      '',
      '### Login latency (argon2id m=64 MiB, t=3, p=4), control plane on both cores',
      '',
      '| measurement | n | p50 ms | p99 ms | max ms |',
      '|---|---:|---:|---:|---:|',
      `| login, one at a time | ${a.n} | ${fmt(a.p50)} | ${fmt(a.p99)} | ${fmt(a.max)} |`,
      `| login, 8 concurrent (${LOGIN_ROUNDS} rounds) | ${c.n} | ${fmt(c.p50)} | ${fmt(c.p99)} | ${fmt(c.max)} |`,
      `| me-like route, sequential, idle server | ${idle.n} | ${fmt(idle.p50)} | ${fmt(idle.p99)} | ${fmt(idle.max)} |`,
      `| me-like route, sequential, during the 8 concurrent logins | ${during.n} | ${fmt(during.p50)} | ${fmt(during.p99)} | ${fmt(during.max)} |`,
      '',
      'The authenticated route keeps answering with a p50 of a few milliseconds while 8 logins hash at once: argon2 runs on the libuv thread pool, not on the event loop. Its tail grows because 8 hashes of 4 lanes each compete with the event loop for the 2 cores; a blocked loop would instead put most samples behind whole hashes (≈ 130 ms each, over a second for 8).',
      '',
    ];
    // Every run is kept: newest first under the title.
    fs.mkdirSync(path.join(here, 'results'), { recursive: true });
    const file = path.join(here, 'results', 'auth.md');
    const previous = fs.existsSync(file) ? fs.readFileSync(file, 'utf8').replace(/^# Auth benchmark\n+/, '') : '';
    lines[0] = `# Auth benchmark\n\n## Run of ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`;
    fs.writeFileSync(file, `${lines.join('\n')}\n${previous ? `\n${previous}` : ''}`);
    console.log('added to bench/results/auth.md');
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    if (dbName && services.postgresUrl) await dropDatabase(services.postgresUrl, dbName).catch(() => {});
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

// ---- entry (after every declaration above) ---------------------------------

if (args[0] === '--serve-bare') {
  const { default: Koa } = await import('koa');
  const app = new Koa();
  app.use((ctx) => {
    if (ctx.path === '/me') ctx.body = { data: { id: '00000000-0000-4000-8000-000000000000', roles: ['subscriber'] } };
  });
  app.listen(Number(args[1]), '127.0.0.1');
} else if (args[0] === '--serve-pg') {
  // The users/me baseline: plain Koa, the same two queries through a pg pool of the control plane's size, the same body.
  const { default: Koa } = await import('koa');
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
  const userId = process.env.BENCH_USER_ID!;
  const app = new Koa();
  app.use(async (ctx) => {
    if (ctx.path !== '/me') return;
    const access = await pool.query(
      `select u.status, ur.role_name, rp.permission, rp.resource_type, rp.resource_id
         from app_user u
         left join user_role ur on ur.user_id = u.id and (ur.expires_at is null or ur.expires_at > now())
         left join role_permission rp on rp.role_name = ur.role_name
        where u.id = $1`, [userId]);
    const roles = [...new Set(access.rows.map((r) => r.role_name).filter(Boolean))].sort();
    const { rows: [u] } = await pool.query('select * from app_user where id = $1', [userId]);
    ctx.body = {
      data: {
        id: u.id, email: u.email, email_verified: u.email_verified, display_name: u.display_name, phone: u.phone,
        phone_verified: u.phone_verified, locale: u.locale, timezone: u.timezone, country_code: u.country_code,
        preferred_language: u.preferred_language, status: u.status, roles, mfa_enabled: u.mfa_enabled,
        notification_preferences: u.notification_preferences, avatar_url: u.avatar_url,
        terms_accepted_at: u.terms_accepted_at?.toISOString() ?? null, last_login_at: u.last_login_at?.toISOString() ?? null,
        created_at: u.created_at.toISOString(), updated_at: u.updated_at.toISOString(),
      },
    };
  });
  app.listen(Number(args[1]), '127.0.0.1');
} else if (args[0] === '--serve-cp') {
  const { loadConfig } = await import('../control-plane/src/config/config.ts');
  const { startControlPlane } = await import('../control-plane/src/server.ts');
  const { data, routesFor } = await import('../control-plane/src/http/route.ts');
  const { requireActor } = await import('../control-plane/src/auth/access-control.ts');
  const { z } = await import('zod');
  const defineRoute = routesFor();
  const meRecord = z.object({ id: z.string(), roles: z.array(z.string()) });
  // Authenticates (signature, expiry, revocation of token and session) and answers from the token.
  const benchMe = defineRoute({
    method: 'get', path: '/v1/bench/me', tags: ['Bench'], access: 'authenticated',
    summary: 'me-like route for the benchmark', responses: { 200: data(meRecord) },
    async handler({ rc }) {
      const caller = requireActor(rc);
      return { id: caller.id, roles: caller.roles };
    },
  });
  const config = loadConfig({ ...process.env, PORT: String(CP_PORT), GRPC_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', RATE_LIMIT_PER_MINUTE: '0', RATE_LIMIT_IP_MULTIPLIER: '10000', NODE_ENV: 'development' });
  // The same route without authentication: the baseline that isolates what authentication costs.
  const benchPublic = defineRoute({
    method: 'get', path: '/v1/bench/public', tags: ['Bench'], access: 'public',
    summary: 'unauthenticated twin of the me-like route', responses: { 200: data(meRecord) },
    async handler() {
      return { id: '00000000-0000-4000-8000-000000000000', roles: ['subscriber'] };
    },
  });
  // A CDN read for a machine API token (`Bearer cdn_...`): the token's resolution (cached per replica,
  // cdn-admin/api-token-cache.ts) and its role's grants, then the same answer from the caller.
  const benchCdn = defineRoute({
    method: 'get', path: '/v1/bench/cdn', tags: ['Bench'], access: { permission: 'cdn.read' },
    summary: 'API-token route for the benchmark', responses: { 200: data(meRecord) },
    async handler({ rc }) {
      const caller = requireActor(rc);
      return { id: caller.id, roles: caller.roles };
    },
  });
  // Fillers up to the route table the finished API will have (DESIGN.md §6: about 170 operations).
  const { routes: productRoutes } = await import('../control-plane/src/capabilities.ts');
  const resources = ['endpoints', 'origins', 'routes', 'cache-rules', 'response-headers-policies', 'log-drains', 'domains', 'signing-keys', 'ip-rules', 'api-tokens', 'audit-logs', 'config/versions', 'edge-nodes', 'purge', 'prefetch', 'plans', 'subscriptions', 'invoices', 'coupons', 'gift-cards', 'notifications', 'profiles', 'payment-methods'];
  const fillers = [];
  for (let i = 0; fillers.length + productRoutes.length + 3 < ROUTE_TABLE_SIZE; i++) {
    const resource = resources[i % resources.length]!;
    const scope = i < resources.length ? '/v1/cdn' : i < 2 * resources.length ? '/v1/admin' : `/v1/x${i}`;
    const variants = [['get', `${scope}/${resource}`], ['post', `${scope}/${resource}`], ['get', `${scope}/${resource}/:id`], ['patch', `${scope}/${resource}/:id`], ['delete', `${scope}/${resource}/:id`], ['post', `${scope}/${resource}/:id/enable`]] as const;
    for (const [method, routePath] of variants) {
      fillers.push(defineRoute({ method, path: routePath, tags: ['Bench'], access: 'public', summary: 'filler', responses: { 200: data(meRecord) }, async handler() { return { id: 'x', roles: [] }; } }));
    }
  }
  const cp = await startControlPlane(config, { extraRoutes: [benchMe, benchPublic, benchCdn, ...fillers], storeKeyPrefix: `bench:${process.pid}:` });
  process.on('SIGTERM', () => { void cp.close().finally(() => process.exit(0)); });
} else {
  await main();
}

