// The node-wide cache and slices, measured on the whole agent (issue 33,
// "Measured in a benchmark"): the agent as operators run it (edge-agent/src/main.ts
// from a CONFIG_FILE, WORKERS, CACHE_DISK_BYTES, DATA_DIR in a temp dir) in
// front of a real origin (node:http in this process, objects of given sizes
// with strong ETags and single byte-range 206 answers, counting requests and
// body bytes sent), and nginx proxy_cache with `slice 1m` for the workload.
// Sections:
//   fetches  origin fetches per object with WORKERS=1, 2, 4 (concurrent, then sequential, over new connections);
//   zipf     a Zipf-distributed video workload through the agent and through nginx: origin bytes ÷ served bytes,
//            the ideal ratio, hit ratio, CPU per served MiB;
//   tier     100 KiB hits from the node tier (memory tier too small to hold them) vs the memory tier: CPU per hit;
//   seeks    1-2 MiB ranges of a 200 MiB object: origin bytes vs the bytes of the slices they cover, then again;
//   restart  (after zipf) the hit ratio of a fixed request count before and after an agent restart.
// Run: node bench/edge-node-cache.ts [--sections fetches,zipf,tier,seeks,restart] [--objects 40] [--requests 600]
//      [--concurrency 8] [--zipf 0.9] [--max-mib 200] [--duration 5] [--rounds 2] [--seeks 20] [--restart-requests 300] [--seed 1]
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { have, listFlag, numberFlag, pin } from './lib/cli.ts';
import { nginxBin, nginxConf } from './lib/nginx.ts';
import { loadAverage, treeCpuMs } from './lib/stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const SECTIONS = new Set(listFlag('sections', 'fetches,zipf,tier,seeks,restart'));
const OBJECTS = numberFlag('objects', 40);
const REQUESTS = numberFlag('requests', 600);
const CONCURRENCY = numberFlag('concurrency', 8);
const ZIPF_S = numberFlag('zipf', 0.9);
const MAX_MIB = numberFlag('max-mib', 200);
const DURATION = numberFlag('duration', 5);
const ROUNDS = numberFlag('rounds', 2);
const SEEKS = numberFlag('seeks', 20);
const RESTART_REQUESTS = numberFlag('restart-requests', 300);
const SEED = numberFlag('seed', 1);
/** --origin-log FILE: every origin request (path, range, status, bytes, time, request headers) as ndjson, for tracing a missed goal. */
const ORIGIN_LOG = listFlag('origin-log', '')[0];
const ORIGIN_PORT = 19301, AGENT_PORT = 19310, AGENT_B_PORT = 19311, NGINX_PORT = 19320;
const KiB = 1024, MiB = 1024 * 1024;
const SLICE = MiB;
const HOST = 'bench.local';

// ---------------------------------------------------------------- the origin
/** Object bytes: byte i of an object with seed s is PATTERN[(i + s) % P] (P is no multiple of the slice size). */
const PATTERN = randomBytes(MiB + 4093);
const P = PATTERN.length;
interface OriginObject { size: number; seed: number; etag: string }
interface OriginRequest { path: string; first: number; last: number; status: number; bytes: number; atMs: number; headers?: http.IncomingHttpHeaders }
const objects = new Map<string, OriginObject>();
const originLog: OriginRequest[] = [];
const lastModified = new Date(Date.now() - 86_400_000).toUTCString();

function addObject(path: string, size: number): OriginObject {
  const o = { size, seed: objects.size * 7919 + 13, etag: `"${objects.size.toString(36)}-v1"` };
  objects.set(path, o);
  return o;
}

function* bytesOf(o: OriginObject, first: number, last: number): Generator<Buffer> {
  for (let pos = first; pos <= last;) {
    const p = (pos + o.seed) % P;
    const n = Math.min(last - pos + 1, P - p, 256 * KiB);
    yield PATTERN.subarray(p, p + n);
    pos += n;
  }
}

/** Whether the chunk is the object's bytes from pos. */
function matches(o: OriginObject, pos: number, chunk: Buffer): boolean {
  for (let at = 0; at < chunk.length;) {
    const p = (pos + at + o.seed) % P;
    const n = Math.min(chunk.length - at, P - p);
    if (PATTERN.compare(chunk, at, at + n, p, p + n) !== 0) return false;
    at += n;
  }
  return true;
}

function startOrigin(): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = req.url!.split('?')[0]!;
    const o = objects.get(path);
    if (o === undefined) return void res.writeHead(404, { 'content-length': '0' }).end();
    let first = 0, last = o.size - 1, status = 200;
    const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
    if (m !== null && (m[1] !== '' || m[2] !== '')) {
      if (m[1] === '') first = Math.max(0, o.size - Number(m[2]));
      else { first = Number(m[1]); if (m[2] !== '') last = Math.min(last, Number(m[2])); }
      if (first >= o.size || last < first) {
        originLog.push({ path, first, last, status: 416, bytes: 0, atMs: performance.now() });
        return void res.writeHead(416, { 'content-range': `bytes */${o.size}`, 'content-length': '0' }).end();
      }
      status = 206;
    }
    const head: Record<string, string> = {
      'content-type': 'video/mp4', 'content-length': String(last - first + 1), etag: o.etag, 'last-modified': lastModified,
      'cache-control': 'public, max-age=3600', 'accept-ranges': 'bytes',
    };
    if (status === 206) head['content-range'] = `bytes ${first}-${last}/${o.size}`;
    const entry: OriginRequest = { path, first, last, status, bytes: 0, atMs: performance.now(), ...(ORIGIN_LOG ? { headers: req.headers } : {}) };
    originLog.push(entry);
    res.writeHead(status, head);
    if (req.method === 'HEAD') return void res.end();
    const counted = function* () { for (const c of bytesOf(o, first, last)) { entry.bytes += c.length; yield c; } };
    Readable.from(counted(), { objectMode: false }).pipe(res);
  });
  return new Promise((resolve) => server.listen(ORIGIN_PORT, '127.0.0.1', () => resolve(server)));
}

const originRequests = (prefix: string) => originLog.filter((r) => r.path.startsWith(prefix)).length;

// ---------------------------------------------------------------- the servers
const children: ChildProcess[] = [];
process.on('exit', () => { for (const c of children) if (c.exitCode === null) c.kill('SIGKILL'); });
process.on('SIGINT', () => process.exit(130));

interface Agent { child: ChildProcess; port: number; env: Record<string, string> }

const snapshotFile = (work: string) => {
  const file = join(work, 'snapshot.json');
  writeFileSync(file, JSON.stringify({
    version: 1,
    endpoints: [{ id: 'b', hostname: HOST, default_origin_id: 'o', origins: [{ id: 'o', scheme: 'http', host: '127.0.0.1', port: ORIGIN_PORT, allow_private_network: true, max_retries: 0, timeout_ms: 30_000 }] }],
  }));
  return file;
};

/** The agent as operators run it, pinned to core 0 (unless cores says otherwise), once it answers. */
async function startAgent(port: number, env: Record<string, string>, cores: string | null = '0'): Promise<Agent> {
  const cmd = [process.execPath, join(here, '../edge-agent/src/main.ts')];
  const child = spawn(...split(cores === null ? cmd : pin(cores, cmd)), {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, HOST: '127.0.0.1', METRICS_HOST: '127.0.0.1', HTTP_PORT: String(port), HTTPS_PORT: 'off', METRICS_PORT: '0', LOG_LEVEL: 'warn', SHUTDOWN_TIMEOUT_MS: '3000', ...env },
  });
  children.push(child);
  await waitForAnswer(port, () => child.exitCode !== null);
  return { child, port, env };
}
const split = (cmd: string[]): [string, string[]] => [cmd[0]!, cmd.slice(1)];

async function stopAgent(a: Agent): Promise<void> {
  if (a.child.exitCode !== null) return;
  const exited = new Promise((r) => a.child.once('exit', r));
  a.child.kill('SIGTERM');
  await exited;
}

/** Waits until the server answers anything on the port (a 404 for an unknown path is an answer). */
async function waitForAnswer(port: number, dead: () => boolean): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (dead()) throw new Error(`the server on port ${port} exited`);
    const ok = await new Promise<boolean>((resolve) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/__ready', headers: { host: HOST } }, (res) => { res.resume(); resolve(true); });
      req.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`port ${port} did not come up`);
}

function ensureTools(): void {
  const missing = ['wrk', 'nginx'].filter((c) => !have(c) && !(c === 'nginx' && existsSync('/usr/sbin/nginx')));
  if (missing.length === 0) return;
  console.log(`installing ${missing.join(', ')} from Debian packages...`);
  execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk nginx-light || apt-get install -y -qq wrk nginx'], { stdio: 'inherit' });
}

/** nginx proxy_cache with slice 1m (its own prefix dir), two workers (as the agent's two), pinned to core 0. */
async function startNginx(prefix: string): Promise<ChildProcess> {
  mkdirSync(join(prefix, 'cache'), { recursive: true });
  const conf = join(prefix, 'nginx.conf');
  writeFileSync(conf, nginxConf(prefix, 2, `${prefix}/cache levels=1:2 keys_zone=bench:50m max_size=64g inactive=1d`, `
  server {
    listen 127.0.0.1:${NGINX_PORT};
    location / {
      slice 1m;
      proxy_cache bench;
      proxy_cache_key $uri$is_args$args$slice_range;
      proxy_set_header Range $slice_range;
      proxy_cache_valid 200 206 1h;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 60s;
      proxy_cache_lock_age 60s;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://127.0.0.1:${ORIGIN_PORT};
      add_header X-Cache-Status $upstream_cache_status;
    }
  }
`));
  const child = spawn(...split(pin(0, [nginxBin(), '-c', conf, '-p', prefix, '-e', join(prefix, 'nginx-error.log')])), { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(child);
  await waitForAnswer(NGINX_PORT, () => child.exitCode !== null);
  return child;
}

// ---------------------------------------------------------------- the viewers
interface Answer { status: number; bytes: number; cache: string; ok: boolean }

/** One GET (a range when given), its body checked against the object's bytes. agent: keep-alive, else a new connection. */
function get(port: number, path: string, range: [number, number] | null, agent?: http.Agent): Promise<Answer> {
  const o = objects.get(path)!;
  const headers: Record<string, string> = { host: HOST };
  if (range !== null) headers.range = `bytes=${range[0]}-${range[1]}`;
  if (agent === undefined) headers.connection = 'close';
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, headers, agent: agent ?? false }, (res) => {
      let pos = range?.[0] ?? 0, ok = true;
      res.on('data', (c: Buffer) => { if (ok && !matches(o, pos, c)) ok = false; pos += c.length; });
      res.on('end', () => {
        const want = range === null ? o.size : Math.min(range[1], o.size - 1) - range[0] + 1;
        const status = res.statusCode!;
        resolve({ status, bytes: pos - (range?.[0] ?? 0), cache: String(res.headers['x-cache-status'] ?? ''), ok: ok && pos - (range?.[0] ?? 0) === want && status === (range === null ? 200 : 206) });
      });
      res.on('error', reject);
    });
    req.setTimeout(120_000, () => req.destroy(new Error(`${path}: timed out`)));
    req.on('error', reject);
  });
}

/** A deterministic generator (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Req { path: string; range: [number, number] | null }

/** The workload's objects: sizes log-uniform in 100 KiB..MAX_MIB, popularity ranks shuffled so size and rank are unrelated. */
function videoObjects(random: () => number): { path: string; size: number; weight: number }[] {
  const lo = Math.log(100 * KiB), hi = Math.log(MAX_MIB * MiB);
  const list = Array.from({ length: OBJECTS }, (_, i) => ({ path: `/v/${i}.mp4`, size: Math.round(Math.exp(lo + (hi - lo) * (i / Math.max(1, OBJECTS - 1)))), weight: 0 }));
  const ranks = list.map((_, i) => i + 1);
  for (let i = ranks.length - 1; i > 0; i--) { const j = Math.floor(random() * (i + 1)); [ranks[i], ranks[j]] = [ranks[j]!, ranks[i]!]; }
  list.forEach((o, i) => (o.weight = 1 / ranks[i]! ** ZIPF_S));
  return list;
}

/**
 * Sessions as players send them: an object by Zipf; objects up to 2 MiB asked whole; larger ones asked whole in
 * one session of ten when up to 32 MiB (a download), else played: from the start (six in ten) or a seek to a random
 * offset, then 1 to 16 consecutive ranges of 1-2 MiB each. Sessions until `count` requests.
 */
function sessions(list: { path: string; size: number; weight: number }[], count: number, random: () => number): Req[][] {
  const total = list.reduce((a, o) => a + o.weight, 0);
  const pick = () => { let x = random() * total; for (const o of list) if ((x -= o.weight) <= 0) return o; return list[list.length - 1]!; };
  const out: Req[][] = [];
  for (let n = 0; n < count;) {
    const o = pick();
    const s: Req[] = [];
    if (o.size <= 2 * MiB || (o.size <= 32 * MiB && random() < 0.1)) s.push({ path: o.path, range: null });
    else {
      let pos = random() < 0.6 ? 0 : Math.floor(random() * o.size);
      const ranges = 1 + Math.floor(random() * 16);
      for (let i = 0; i < ranges && pos < o.size && n + s.length < count; i++) {
        const len = MiB + Math.floor(random() * MiB);
        const last = Math.min(o.size - 1, pos + len - 1);
        s.push({ path: o.path, range: [pos, last] });
        pos = last + 1;
      }
    }
    n += s.length;
    out.push(s);
  }
  return out;
}

interface Played { requests: number; served: number; hits: number; bad: number; seconds: number; statuses: Map<string, number>; byRequest: Map<string, string> }

/** Plays the sessions with CONCURRENCY players, each on keep-alive connections of its own. */
async function play(port: number, list: Req[][]): Promise<Played> {
  const queue = list.map((s, i) => ({ s, i }));
  const r: Played = { requests: 0, served: 0, hits: 0, bad: 0, seconds: 0, statuses: new Map(), byRequest: new Map() };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      for (const [j, q] of next.s.entries()) {
        const a = await get(port, q.path, q.range, agent);
        r.requests++;
        r.served += a.bytes;
        if (a.cache === 'HIT') r.hits++;
        if (!a.ok) r.bad++;
        const key = `${q.range === null ? 'whole' : 'range'} ${a.cache || '-'}`;
        r.statuses.set(key, (r.statuses.get(key) ?? 0) + 1);
        r.byRequest.set(`${next.i}.${j}`, a.cache);
      }
    }
    agent.destroy();
  }));
  r.seconds = (performance.now() - t0) / 1000;
  return r;
}

/** Bytes of the union of intervals ([first, last] inclusive). */
function unionBytes(intervals: [number, number][]): number {
  const s = [...intervals].sort((a, b) => a[0] - b[0]);
  let total = 0, end = -1;
  for (const [a, b] of s) {
    if (b <= end) continue;
    total += b - Math.max(a, end + 1) + 1;
    end = b;
  }
  return total;
}

/** Each distinct byte asked once, and each distinct slice that holds an asked byte once. */
function ideal(list: Req[][]): { bytes: number; sliceBytes: number } {
  const by = new Map<string, [number, number][]>();
  for (const q of list.flat()) {
    const size = objects.get(q.path)!.size;
    const r: [number, number] = q.range ?? [0, size - 1];
    (by.get(q.path) ?? by.set(q.path, []).get(q.path)!).push([r[0], Math.min(r[1], size - 1)]);
  }
  let bytes = 0, sliceBytes = 0;
  for (const [path, rs] of by) {
    const size = objects.get(path)!.size;
    bytes += unionBytes(rs);
    sliceBytes += unionBytes(rs.map(([a, b]) => [Math.floor(a / SLICE) * SLICE, Math.min(size - 1, Math.floor(b / SLICE) * SLICE + SLICE - 1)]));
  }
  return { bytes, sliceBytes };
}

/** Origin bytes asked more than once for the paths under prefix, and the ranges asked most often. */
function duplicates(prefix: string): { redundant: number; top: string[] } {
  const by = new Map<string, OriginRequest[]>();
  for (const r of originLog) if (r.path.startsWith(prefix)) (by.get(r.path) ?? by.set(r.path, []).get(r.path)!).push(r);
  let redundant = 0;
  const asked = new Map<string, number>();
  for (const [path, rs] of by) {
    redundant += rs.reduce((a, r) => a + r.bytes, 0) - unionBytes(rs.filter((r) => r.bytes > 0).map((r) => [r.first, r.first + r.bytes - 1]));
    for (const r of rs) asked.set(`${path} ${r.first}-${r.last}`, (asked.get(`${path} ${r.first}-${r.last}`) ?? 0) + 1);
  }
  const top = [...asked].filter(([, n]) => n > 1).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, n]) => `${k} ×${n}`);
  return { redundant, top };
}

// ---------------------------------------------------------------- sections
const lines: string[] = [];
const say = (...ss: string[]) => { for (const s of ss) { console.log(s); lines.push(s); } };
const fmtMiB = (b: number) => (b / MiB).toFixed(1);
const verdict = (ok: boolean) => (ok ? 'met' : '**missed**');

async function fetchesSection(work: string, config: string): Promise<void> {
  const N = 20, C = 16;
  say('### Origin fetches per object by WORKERS', '');
  say(`${N} objects of 64 KiB, each asked by ${C} concurrent clients at once and then ${C} more one after another, every request on a new connection (\`connection: close\`); CACHE_DISK_BYTES=256MiB, CACHE_MEMORY_BYTES=64MiB, a fresh DATA_DIR per line. Goal: 1 origin fetch per object.`);
  say('');
  say('| WORKERS | requests | origin requests | per object | goal |');
  say('|---|---|---|---|---|');
  for (const w of [1, 2, 4]) {
    const prefix = `/w${w}/`;
    for (let i = 0; i < N; i++) addObject(`${prefix}${i}`, 64 * KiB);
    const agent = await startAgent(AGENT_PORT, { CONFIG_FILE: config, WORKERS: String(w), CACHE_DISK_BYTES: '256MiB', CACHE_MEMORY_BYTES: '64MiB', DATA_DIR: join(work, `fetches-${w}`) }, null);
    let requests = 0, bad = 0;
    for (let i = 0; i < N; i++) {
      const answers = await Promise.all(Array.from({ length: C }, () => get(AGENT_PORT, `${prefix}${i}`, null)));
      for (let j = 0; j < C; j++) answers.push(await get(AGENT_PORT, `${prefix}${i}`, null));
      requests += answers.length;
      bad += answers.filter((a) => !a.ok).length;
    }
    await stopAgent(agent);
    const per = originRequests(prefix) / N;
    say(`| ${w} | ${requests}${bad ? ` (${bad} bad)` : ''} | ${originRequests(prefix)} | ${per.toFixed(2)} | ${verdict(per === 1 && bad === 0)} |`);
  }
  say('');
}

interface ZipfState { agent: Agent; list: ReturnType<typeof videoObjects> }

async function zipfSection(work: string, config: string): Promise<ZipfState> {
  const list = videoObjects(rng(SEED));
  for (const o of list) addObject(o.path, o.size);
  const load = sessions(list, REQUESTS, rng(SEED + 1));
  const totalBytes = list.reduce((a, o) => a + o.size, 0);
  const want = ideal(load);
  const diskBytes = Math.ceil((2 * totalBytes) / MiB + 256);
  const agent = await startAgent(AGENT_PORT, { CONFIG_FILE: config, WORKERS: '2', CACHE_DISK_BYTES: `${diskBytes}MiB`, CACHE_MEMORY_BYTES: '64MiB', DATA_DIR: join(work, 'zipf-agent') });
  const nginx = await startNginx(join(work, 'nginx'));
  const rows: string[] = [];
  const figures: Record<string, { origin: number; played: Played; cpuMs: number; dup: ReturnType<typeof duplicates> }> = {};
  for (const [name, port, pid] of [['edge agent', AGENT_PORT, agent.child.pid!], ['nginx slice 1m', NGINX_PORT, nginx.pid!]] as const) {
    const mark = originLog.length;
    const cpu0 = treeCpuMs(pid);
    const played = await play(port, load);
    const cpuMs = treeCpuMs(pid) - cpu0;
    const slice = originLog.slice(mark);
    const origin = slice.reduce((a, r) => a + r.bytes, 0);
    // duplicates() reads originLog by prefix: look at this server's part only.
    const saved = originLog.splice(0, originLog.length, ...slice);
    const dup = duplicates('/v/');
    originLog.splice(0, originLog.length, ...saved);
    figures[name] = { origin, played, cpuMs, dup };
    rows.push(`| ${name} | ${played.requests}${played.bad ? ` (${played.bad} bad)` : ''} | ${fmtMiB(played.served)} | ${fmtMiB(origin)} (${slice.length} req.) | ${(origin / played.served).toFixed(3)} | ${(origin / want.bytes).toFixed(3)} | ${(origin / want.sliceBytes).toFixed(3)} | ${((100 * played.hits) / played.requests).toFixed(1)} % | ${((100 * (1 - origin / played.served))).toFixed(1)} % | ${(cpuMs / 1000 / (played.served / MiB) * 1000).toFixed(2)} | ${played.seconds.toFixed(1)} |`);
  }
  nginx.kill('SIGTERM');
  const a = figures['edge agent']!, n = figures['nginx slice 1m']!;
  say('### Zipf video workload: edge agent vs nginx proxy_cache + slice 1m', '');
  say(`${OBJECTS} objects (${fmtMiB(totalBytes)} MiB in all), sizes log-uniform 100 KiB–${MAX_MIB} MiB, Zipf s=${ZIPF_S} over shuffled ranks; ${load.length} sessions, ${load.flat().length} requests (${load.flat().filter((q) => q.range === null).length} whole, the rest 1–2 MiB ranges at sequential offsets from the start or a seek), played by ${CONCURRENCY} players on keep-alive connections, the same list for both servers, every body checked byte for byte. Agent: WORKERS=2, CACHE_MEMORY_BYTES=64MiB, CACHE_DISK_BYTES=${diskBytes}MiB, slices 1 MiB (above 8 MiB); nginx: 2 workers, \`slice 1m\`, \`proxy_cache_lock on\`, key \`$uri$slice_range\`. Both pinned to core 0, origin and players to core 1. Ideal: each distinct byte asked once (${fmtMiB(want.bytes)} MiB); slice-ideal: each 1 MiB slice holding an asked byte once (${fmtMiB(want.sliceBytes)} MiB). Hit ratio: answers whose X-Cache-Status is HIT (for both, the status of the answer's first slice); byte hit ratio: 1 − origin ÷ served. CPU: the server's processes (agent primary + workers; nginx master + workers), /proc.`);
  say('');
  say('| server | requests | served MiB | origin MiB | origin ÷ served | ÷ ideal | ÷ slice-ideal | hit ratio | byte hit ratio | CPU ms per served MiB | wall s |');
  say('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) say(r);
  say('');
  say(`- Goal origin bytes ≤ 1.05× ideal: ${verdict(a.origin <= 1.05 * want.bytes)} (${(a.origin / want.bytes).toFixed(3)}×; nginx ${(n.origin / want.bytes).toFixed(3)}×).`);
  say(`- Goal hit ratio ≥ nginx's: ${verdict(a.played.hits / a.played.requests >= n.played.hits / n.played.requests)} (${((100 * a.played.hits) / a.played.requests).toFixed(1)} % vs ${((100 * n.played.hits) / n.played.requests).toFixed(1)} %).`);
  say(`- CPU per served MiB, agent ÷ nginx: ${((a.cpuMs / a.played.served) / (n.cpuMs / n.played.served)).toFixed(2)}×.`);
  for (const [name, f] of Object.entries(figures)) say(`- ${name}: X-Cache-Status by request kind: ${[...f.played.statuses].sort().map(([k, v]) => `${k} ${v}`).join(', ')}.`);
  const named = (k: string) => { const [i, j] = k.split('.').map(Number); const q = load[i!]![j!]!; return `${k} ${q.path} ${q.range === null ? 'whole' : q.range.join('-')}`; };
  const differ = (x: Played, y: Played) => [...x.byRequest].filter(([k, v]) => v !== 'HIT' && y.byRequest.get(k) === 'HIT').map(([k]) => named(k));
  say(`- Requests a HIT at one server and not at the other: the agent's ${differ(a.played, n.played).length} (${differ(a.played, n.played).slice(0, 8).join(', ')}), nginx's ${differ(n.played, a.played).length} (${differ(n.played, a.played).slice(0, 8).join(', ')}) (session.request; each session's requests in order by one player, so a request that was a miss at one and a hit at the other raced another player for its slice).`);
  for (const [name, f] of Object.entries(figures)) say(`- ${name}: origin bytes asked more than once ${fmtMiB(f.dup.redundant)} MiB${f.dup.top.length ? `; ranges asked twice or more: ${f.dup.top.join(', ')}` : ''}.`);
  say('');
  return { agent, list };
}

async function restartSection(state: ZipfState): Promise<void> {
  const before = sessions(state.list, RESTART_REQUESTS, rng(SEED + 100));
  const after = sessions(state.list, RESTART_REQUESTS, rng(SEED + 200));
  let mark = originLog.length;
  const b = await play(AGENT_PORT, before);
  const bOrigin = originLog.slice(mark).reduce((a, r) => a + r.bytes, 0);
  await stopAgent(state.agent);
  const t0 = performance.now();
  const agent = await startAgent(AGENT_PORT, state.agent.env);
  const ready = (performance.now() - t0) / 1000;
  mark = originLog.length;
  const a = await play(AGENT_PORT, after);
  const aOrigin = originLog.slice(mark).reduce((x, r) => x + r.bytes, 0);
  await stopAgent(agent);
  const hb = b.hits / b.requests, ha = a.hits / a.requests;
  say('### Restart: the working set after an agent restart', '');
  say(`After the Zipf run, the agent plays ${RESTART_REQUESTS} more requests of the same workload (sessions of another seed), is stopped (SIGTERM) and started again on the same DATA_DIR (answering ${ready.toFixed(1)} s after the start), then plays ${RESTART_REQUESTS} requests of a third seed — a fixed request count instead of the first minute (${a.seconds.toFixed(1)} s here).`);
  say('');
  say('| | requests | hit ratio | served MiB | origin MiB | wall s |');
  say('|---|---|---|---|---|---|');
  say(`| before the restart | ${b.requests}${b.bad ? ` (${b.bad} bad)` : ''} | ${(100 * hb).toFixed(1)} % | ${fmtMiB(b.served)} | ${fmtMiB(bOrigin)} | ${b.seconds.toFixed(1)} |`);
  say(`| after the restart | ${a.requests}${a.bad ? ` (${a.bad} bad)` : ''} | ${(100 * ha).toFixed(1)} % | ${fmtMiB(a.served)} | ${fmtMiB(aOrigin)} | ${a.seconds.toFixed(1)} |`);
  say('');
  say(`- Goal after ≥ 95 % of before: ${verdict(ha >= 0.95 * hb)} (${((100 * ha) / hb).toFixed(1)} %).`, '');
}

/** wrk cycling over the paths, pinned to core 1; requests done. */
function wrk(port: number, paths: string[], seconds: number): number {
  const lua = join(tmpdir(), `wrk-node-cache-${process.pid}.lua`);
  writeFileSync(lua, `paths = {${paths.map((p) => `"${p}"`).join(',')}}\ni = 0\nwrk.headers["Host"] = "${HOST}"\nrequest = function()\n  i = i % #paths + 1\n  return wrk.format("GET", paths[i])\nend\n`);
  const out = execFileSync(...split(pin(1, ['wrk', '-t1', '-c32', `-d${seconds}s`, '-s', lua, `http://127.0.0.1:${port}/`])), { encoding: 'utf8' });
  if (/Non-2xx/.test(out)) throw new Error(`non-2xx answers:\n${out}`);
  return Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
}

async function tierSection(work: string, config: string): Promise<void> {
  const paths = Array.from({ length: 200 }, (_, i) => `/t/${i}`);
  for (const p of paths) addObject(p, 100 * KiB);
  const memory = await startAgent(AGENT_PORT, { CONFIG_FILE: config, WORKERS: '1', CACHE_MEMORY_BYTES: '256MiB', CACHE_DISK_BYTES: '0', DATA_DIR: join(work, 'tier-memory') });
  const node = await startAgent(AGENT_B_PORT, { CONFIG_FILE: config, WORKERS: '1', CACHE_MEMORY_BYTES: '1MiB', CACHE_DISK_BYTES: '256MiB', DATA_DIR: join(work, 'tier-node') });
  for (const port of [AGENT_PORT, AGENT_B_PORT]) for (const p of paths) await get(port, p, null, undefined);
  // The node tier's fills are written after the answer: a second pass, then the count the measured runs must not raise.
  for (const port of [AGENT_PORT, AGENT_B_PORT]) for (const p of paths) await get(port, p, null, undefined);
  const filled = originRequests('/t/');
  wrk(AGENT_PORT, paths, 2);
  wrk(AGENT_B_PORT, paths, 2);
  const runs: Record<string, number[]> = { memory: [], node: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, a] of [['memory', memory], ['node', node]] as const) {
      const cpu0 = treeCpuMs(a.child.pid!);
      const n = wrk(a.port, paths, DURATION);
      runs[name]!.push(((treeCpuMs(a.child.pid!) - cpu0) * 1000) / n);
    }
  }
  const refetched = originRequests('/t/') - filled;
  await stopAgent(memory);
  await stopAgent(node);
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  const m = med(runs.memory!), n = med(runs.node!);
  say('### 100 KiB hits: node tier vs memory tier', '');
  say(`200 objects of 100 KiB asked round robin by wrk (-t1 -c32, ${DURATION} s, ${ROUNDS} rounds alternating, median), one worker each, pinned to core 0: **memory** (CACHE_MEMORY_BYTES=256MiB, no node tier) and **node** (CACHE_MEMORY_BYTES=1MiB in front of CACHE_DISK_BYTES=256MiB: the 20 MiB cycled through it misses the memory tier, every hit is read from LMDB). Origin requests during the measured runs: ${refetched} (0: every answer was a hit).`);
  say('');
  say('| tier | CPU µs per hit (rounds) | hit rate per CPU second |');
  say('|---|---|---|');
  say(`| memory | ${m.toFixed(1)} (${runs.memory!.map((x) => x.toFixed(1)).join(', ')}) | ${(1e6 / m).toFixed(0)} |`);
  say(`| node | ${n.toFixed(1)} (${runs.node!.map((x) => x.toFixed(1)).join(', ')}) | ${(1e6 / n).toFixed(0)} |`);
  say('');
  say(`- Goal node ≥ 0.9× memory's rate: ${verdict(m / n >= 0.9 && refetched === 0)} (${(m / n).toFixed(2)}×).`, '');
}

async function seeksSection(work: string, config: string): Promise<void> {
  const path = '/seek/movie.mp4';
  const size = 200 * MiB;
  addObject(path, size);
  const agent = await startAgent(AGENT_PORT, { CONFIG_FILE: config, WORKERS: '2', CACHE_DISK_BYTES: '1GiB', CACHE_MEMORY_BYTES: '64MiB', DATA_DIR: join(work, 'seeks') });
  const random = rng(SEED + 7);
  const seeks: [number, number][] = Array.from({ length: SEEKS }, () => {
    const first = Math.floor(random() * (size - 2 * MiB));
    return [first, first + MiB + Math.floor(random() * MiB) - 1];
  });
  const round = async () => {
    const mark = originLog.length;
    let served = 0, bad = 0, hits = 0;
    for (const s of seeks) {
      const a = await get(AGENT_PORT, path, s);
      served += a.bytes;
      if (!a.ok) bad++;
      if (a.cache === 'HIT') hits++;
    }
    const log = originLog.slice(mark);
    return { served, bad, hits, origin: log.reduce((x, r) => x + r.bytes, 0), requests: log.length };
  };
  const first = await round();
  const again = await round();
  await stopAgent(agent);
  const covered = unionBytes(seeks.map(([a, b]) => [Math.floor(a / SLICE) * SLICE, Math.min(size - 1, Math.floor(b / SLICE) * SLICE + SLICE - 1)]));
  say('### Seeks into a 200 MiB object', '');
  say(`${SEEKS} ranges of 1–2 MiB at random offsets of one 200 MiB object, one after another on new connections (WORKERS=2, so they spread over both workers), then the same ${SEEKS} again. Slices cover ${fmtMiB(covered)} MiB.`);
  say('');
  say('| round | served MiB | origin MiB | origin requests | origin ÷ covered | hits |');
  say('|---|---|---|---|---|---|');
  for (const [name, r] of [['first', first], ['repeated', again]] as const) say(`| ${name} | ${fmtMiB(r.served)}${r.bad ? ` (${r.bad} bad)` : ''} | ${fmtMiB(r.origin)} | ${r.requests} | ${(r.origin / covered).toFixed(3)} | ${r.hits}/${SEEKS} |`);
  say('');
  say(`- Goal origin ≤ 1.1× covered: ${verdict(first.origin <= 1.1 * covered)}; repeated seeks 0 origin bytes: ${verdict(again.origin === 0)}.`, '');
}

async function main(): Promise<void> {
  if (have('taskset')) execFileSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' });
  if (SECTIONS.has('zipf')) ensureTools();
  const loadStart = loadAverage();
  const started = new Date();
  const work = mkdtempSync(join(tmpdir(), 'edge-node-cache-'));
  const config = snapshotFile(work);
  const origin = await startOrigin();
  try {
    if (SECTIONS.has('fetches')) await fetchesSection(work, config);
    if (SECTIONS.has('seeks')) await seeksSection(work, config);
    if (SECTIONS.has('tier')) await tierSection(work, config);
    if (SECTIONS.has('zipf')) {
      const state = await zipfSection(work, config);
      if (SECTIONS.has('restart')) await restartSection(state);
      else await stopAgent(state.agent);
    }
  } finally {
    if (ORIGIN_LOG) writeFileSync(ORIGIN_LOG, originLog.map((r) => JSON.stringify(r)).join('\n') + '\n');
    origin.closeAllConnections();
    origin.close();
    rmSync(work, { recursive: true, force: true });
  }
  const file = join(here, 'results/edge-node-cache.md');
  const title = '# The node-wide cache and slices on the whole agent (bench/edge-node-cache.ts)\n';
  const old = existsSync(file) ? readFileSync(file, 'utf8').replace(title, '') : '';
  const head = `## ${started.toISOString().slice(0, 16).replace('T', ' ')} — load ${loadStart} at the start, ${loadAverage()} at the end; Node ${process.version}\n\nCommand: \`node bench/edge-node-cache.ts ${process.argv.slice(2).join(' ')}\`\n\n`;
  writeFileSync(file, `${title}\n${head}${lines.join('\n')}\n${old.replace(/^\n+/, '\n')}`);
  console.log(`written to ${file}`);
}

await main();
process.exit(0);
