// Cache-hit throughput and latency: the edge agent vs a plain node:http server
// answering the same bytes from memory vs nginx proxy_cache, one worker each,
// 1 KiB and 100 KiB objects. Servers are pinned to core 0, wrk to core 1.
// Then, in the same run: the agent's hits with edge policies active (a signing
// key checked on every request, 1,000 IP rules, a response headers policy)
// against its plain hits, and its compressed hits (gzip and br variants served
// from cache) against the plain server sending the same encoded bytes and
// against its own identity hits of the same text. And the edge at full size
// (issue 23): the agent with 1 and 2 worker processes, HTTPS hits (HTTP/1.1
// over TLS, wrk) against plaintext hits and against nginx with TLS, and HTTP/2
// hits (h2load) against HTTPS/1.1 hits and nginx's HTTP/2, with each server's
// CPU time per request beside req/s. The pairs include prefix tokens (issue 36)
// against today's signed URL, each on a repeated token (section "prefix" runs
// those alone).
// Run: npx node bench/edge-cache-hit.ts [--duration 10] [--warmup 3] [--rounds 2] [--sections main,pairs,full] [--base-port 18801]
// (--sections: which parts run; a partial run records only those, e.g. `--sections main --rounds 3`.)
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { connect } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pathWithToken, signPrefixToken } from '../shared/src/signing/prefix-token.ts';
import { signPath } from '../shared/src/signing/signed-url.ts';
import { have, listFlag, numberFlag, pin } from './lib/cli.ts';
import { BENCH_SIGNING_SECRET, benchSnapshot } from './lib/edge-bench-config.ts';
import { nginxBin, nginxConf } from './lib/nginx.ts';
import { loadAverage, treeCpuMs } from './lib/stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const DURATION = numberFlag('duration', 10);
const WARMUP = numberFlag('warmup', 3);
const CONNECTIONS = numberFlag('connections', 64);
/** Rounds of the policy and compression pairs, alternating the two sides (the median is reported). */
const ROUNDS = numberFlag('rounds', 2);
/** main: agent vs plain node:http vs nginx; pairs: policies and compressed hits (prefix: only the prefix-token pairs); full: workers, HTTPS, HTTP/2. */
const SECTIONS = new Set(listFlag('sections', 'main,pairs,full'));
/** The first of the ten ports the run listens on (--base-port: another range, when another run shares the host). */
const BASE_PORT = numberFlag('base-port', 18801);
const ORIGIN_PORT = BASE_PORT, PLAIN_PORT = BASE_PORT + 1, AGENT_PORT = BASE_PORT + 2, NGINX_PORT = BASE_PORT + 3;
const AGENT_TLS_PORT = BASE_PORT + 4, NGINX_TLS_PORT = BASE_PORT + 5, AGENT2_PORT = BASE_PORT + 6, NGINX_COPY_PORT = BASE_PORT + 7;
/** Node's own limit over TLS: plain node:https and node:http2 (core stream API) answering the agent's hit bytes and head. */
const PLAIN_TLS_PORT = BASE_PORT + 8, PLAIN_H2_PORT = BASE_PORT + 9;

function ensureTools(): void {
  const missing = ['wrk', 'nginx', 'h2load', 'openssl'].filter((c) => !have(c) && !(c === 'nginx' && have('/usr/sbin/nginx')));
  if (missing.length === 0) return;
  console.log(`installing ${missing.join(', ')} from Debian packages...`);
  execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk nghttp2-client openssl nginx-light || apt-get install -y -qq wrk nghttp2-client openssl nginx'], { stdio: 'inherit' });
}

const children: ChildProcess[] = [];
function start(cmd: string[]): ChildProcess {
  const child = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(child);
  return child;
}
function cleanup(): void {
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
}
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));

async function waitFor(url: string, host: string, headers: Record<string, string> = {}): Promise<void> {
  for (let i = 0; i < 100; i++) {
    // fetch() drops a Host header, so use node:http.
    const ok = await new Promise<boolean>((resolve) => {
      const req = httpGet(url, { headers: { host, ...headers } }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not come up`);
}

/** Waits until something accepts connections on the port (the TLS baselines, probed before they are measured). */
async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true); });
      socket.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`port ${port} did not come up`);
}

interface Result { rps: number; p50: number; p99: number; requests: number }
interface Measured extends Result { cpuUsPerRequest: number }

/** The median of each figure on its own (a round's req/s and CPU need not come from the same round). */
function median(xs: Measured[]): Measured {
  const by = (k: keyof Measured) => [...xs].sort((a, b) => a[k] - b[k])[Math.floor((xs.length - 1) / 2)]![k];
  return { rps: by('rps'), p50: by('p50'), p99: by('p99'), requests: by('requests'), cpuUsPerRequest: by('cpuUsPerRequest') };
}

/** Header fields and bytes of one response (status line to blank line), to check the baseline answers like the agent. */
function responseHead(port: number, host: string, path: string, extra = ''): Promise<{ fields: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`));
    let buf = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      buf += chunk;
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) return;
      socket.destroy();
      const head = buf.slice(0, end + 4);
      resolve({ fields: head.split('\r\n').length - 3, bytes: head.length });
    });
    socket.on('error', reject);
  });
}

/** h2load against one URL (its host is the SNI and :authority) for `seconds` (16 connections × 4 streams; --h1: HTTP/1.1, one request per connection at a time). */
function h2load(url: string, seconds: number, h1 = false): Result {
  const args = ['h2load', '-t1', '-c16', h1 ? '-m1' : '-m4', '-D', String(seconds), ...(h1 ? ['--h1'] : []), url];
  const cmd = pin(1, args);
  const out = execFileSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  const rps = Number(/finished in [\d.]+\w*, ([\d.]+) req\/s/.exec(out)?.[1] ?? 0);
  const succeeded = Number(/(\d+) succeeded/.exec(out)?.[1] ?? 0);
  const done = Number(/(\d+) done/.exec(out)?.[1] ?? 0);
  if (succeeded < done) throw new Error(`failed requests from ${url}:\n${out}`);
  const mean = /time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)/.exec(out);
  const meanMs = mean ? Number(mean[1]) * (mean[2] === 'us' ? 0.001 : mean[2] === 's' ? 1000 : 1) : Number.NaN;
  return { rps, p50: meanMs, p99: Number.NaN, requests: succeeded };
}

/** wrk for DURATION seconds with the CPU time the server (pid and its children) spent per request served. */
function measureAt(url: string, host: string, pid: number, headers: Record<string, string> = {}): Measured {
  const before = treeCpuMs(pid);
  const r = wrk(url, host, DURATION, headers);
  return { ...r, cpuUsPerRequest: ((treeCpuMs(pid) - before) * 1000) / Math.max(1, r.requests) };
}

function wrk(url: string, host: string, seconds: number, headers: Record<string, string> = {}): Result {
  const lua = join(tmpdir(), `wrk-host-${process.pid}.lua`);
  writeFileSync(lua, Object.entries({ Host: host, ...headers }).map(([k, v]) => `wrk.headers["${k}"] = "${v}"\n`).join(''));
  const cmd = pin(1, ['wrk', '-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency', '-s', lua, url]);
  const out = execFileSync(cmd[0], cmd.slice(1), { encoding: 'utf8' });
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0);
  const ms = (label: string) => {
    const m = new RegExp(`\\s${label}\\s+([\\d.]+)(us|ms|s)`).exec(out);
    if (!m) return Number.NaN;
    const v = Number(m[1]);
    return m[2] === 'us' ? v / 1000 : m[2] === 's' ? v * 1000 : v;
  };
  if (/Non-2xx/.test(out)) throw new Error(`non-2xx responses from ${url}:\n${out}`);
  return { rps, p50: ms('50%'), p99: ms('99%'), requests: Number(/(\d+) requests in/.exec(out)?.[1] ?? 0) };
}

async function main(): Promise<void> {
  ensureTools();
  const loadStart = loadAverage();
  const work = mkdtempSync(join(tmpdir(), 'edge-bench-'));
  const node = process.execPath;
  // Origin (unpinned, only hit during warm-up) and the plain baseline.
  start([node, join(here, 'lib/plain-server.ts'), String(ORIGIN_PORT)]);
  const plainPid = start(pin(0, [node, join(here, 'lib/plain-server.ts'), String(PLAIN_PORT), 'baseline'])).pid!;
  // A certificate for the benchmark's names (self-signed; the clients do not verify), for the agent's and nginx's TLS.
  // The HTTPS clients connect to localhost (127.0.0.1), the name they send as SNI (see edge-bench-config.ts).
  const certFile = join(work, 'bench.pem'), keyFile = join(work, 'bench.key');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '2',
    '-subj', '/CN=bench.local', '-addext', 'subjectAltName=DNS:localhost,DNS:bench.local'], { stdio: 'ignore' });
  const plainTlsPid = start(pin(0, [node, join(here, 'lib/plain-server.ts'), String(PLAIN_TLS_PORT), 'baseline-https', certFile, keyFile])).pid!;
  const plainH2Pid = start(pin(0, [node, join(here, 'lib/plain-server.ts'), String(PLAIN_H2_PORT), 'baseline-h2', certFile, keyFile])).pid!;
  const agentPid = start(pin(0, [node, join(here, 'lib/agent-server.ts'), String(AGENT_PORT), String(ORIGIN_PORT), join(work, 'agent'), String(AGENT_TLS_PORT), certFile, keyFile])).pid!;
  // The agent process as operators run it, with 2 workers (a primary and two data-plane processes), on both cores.
  const snapshotFile = join(work, 'snapshot.json');
  writeFileSync(snapshotFile, JSON.stringify(benchSnapshot(ORIGIN_PORT)));
  const agent2 = spawn(node, [join(here, '../edge-agent/src/main.ts')], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, WORKERS: '2', CONFIG_FILE: snapshotFile, HTTP_PORT: String(AGENT2_PORT), HTTPS_PORT: 'off', METRICS_PORT: '0', HOST: '127.0.0.1', METRICS_HOST: '127.0.0.1', LOG_LEVEL: 'warn', DATA_DIR: join(work, 'agent2'), CACHE_MEMORY_BYTES: '512MiB' },
  });
  children.push(agent2);
  mkdirSync(join(work, 'nginx-cache'), { recursive: true });
  const conf = join(work, 'nginx.conf');
  // The same cache behind both of nginx's servers (plaintext, and TLS with HTTP/2).
  const cachedLocation = `location / {
      proxy_pass http://127.0.0.1:${ORIGIN_PORT};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache bench;
      proxy_cache_valid 200 1h;
      add_header X-Cache-Status $upstream_cache_status;
    }`;
  writeFileSync(conf, nginxConf(work, 1, `${work}/nginx-cache levels=1:2 keys_zone=bench:10m max_size=1g inactive=60m`, `
  server {
    listen 127.0.0.1:${NGINX_PORT};
    ${cachedLocation}
  }
  # Diagnostic: the same cache with the body copied through user space (write/writev), as Node must send it.
  server {
    listen 127.0.0.1:${NGINX_COPY_PORT};
    sendfile off;
    ${cachedLocation}
  }
  server {
    listen 127.0.0.1:${NGINX_TLS_PORT} ssl http2;
    ssl_certificate ${certFile};
    ssl_certificate_key ${keyFile};
    ssl_protocols TLSv1.2 TLSv1.3;
    ${cachedLocation}
  }
`));
  const nginxPid = start(pin(0, [nginxBin(), '-c', conf, '-p', work, '-e', join(work, 'nginx-error.log')])).pid!;
  await waitFor(`http://127.0.0.1:${ORIGIN_PORT}/1k`, 'x');
  await waitFor(`http://127.0.0.1:${PLAIN_PORT}/1k`, 'x');
  await waitFor(`http://127.0.0.1:${AGENT_PORT}/1k`, 'bench.local');
  await waitFor(`http://127.0.0.1:${NGINX_PORT}/1k`, 'x');
  await waitFor(`http://127.0.0.1:${NGINX_COPY_PORT}/1k`, 'x');

  const targets = [
    { name: 'plain node:http', port: PLAIN_PORT, host: 'plain.local', pid: plainPid },
    { name: 'edge agent', port: AGENT_PORT, host: 'bench.local', pid: agentPid },
    { name: 'nginx proxy_cache', port: NGINX_PORT, host: 'nginx.local', pid: nginxPid },
    { name: 'nginx proxy_cache, sendfile off', port: NGINX_COPY_PORT, host: 'nginx.local', pid: nginxPid },
  ];
  const heads: string[] = [];
  for (const t of targets) {
    const h = await responseHead(t.port, t.host, '/1k');
    heads.push(`${t.name}: ${h.fields} fields, ${h.bytes} bytes`);
  }
  console.log(`response heads (1 KiB): ${heads.join('; ')}`);
  // Each server measured ROUNDS times, the order rotating each round (whatever else runs on the host lands on
  // all three alike); medians, with the server's CPU time per request (every process of it) beside req/s.
  const results: Record<string, Record<string, Measured>> = {};
  for (const size of SECTIONS.has('main') ? ['1k', '100k'] : []) {
    const runs = new Map<string, Measured[]>(targets.map((t) => [t.name, []]));
    for (const t of targets) wrk(`http://127.0.0.1:${t.port}/${size}`, t.host, WARMUP); // warm-up: fills caches, lets V8 optimise
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < targets.length; i++) {
        const t = targets[(i + round) % targets.length]!;
        runs.get(t.name)!.push(measureAt(`http://127.0.0.1:${t.port}/${size}`, t.host, t.pid));
      }
    }
    results[size] = {};
    for (const t of targets) {
      const r = (results[size][t.name] = median(runs.get(t.name)!));
      console.log(`${size.padEnd(5)} ${t.name.padEnd(18)} ${r.rps.toFixed(0).padStart(8)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  ${r.cpuUsPerRequest.toFixed(1)} µs CPU/req`);
    }
  }
  // Policies and compression: each pair measured back to back, sides alternating, ROUNDS times; medians.
  // Besides throughput, each measurement reads the server's CPU time (its threads' schedstat) per request
  // served: what a hit costs the server, which load elsewhere on the host disturbs far less than req/s.
  interface Side { name: string; port: number; host: string; path: string; headers?: Record<string, string> }
  const pidOf = (side: Side) => (side.port === AGENT_PORT ? agentPid : plainPid);
  const measure = (side: Side): Measured => measureAt(`http://127.0.0.1:${side.port}${side.path}`, side.host, pidOf(side), side.headers);
  const measurePair = async (a: Side, b: Side): Promise<[Measured, Measured]> => {
    const ra: Measured[] = [], rb: Measured[] = [];
    for (const side of [a, b]) {
      await waitFor(`http://127.0.0.1:${side.port}${side.path}`, side.host, side.headers);
      wrk(`http://127.0.0.1:${side.port}${side.path}`, side.host, WARMUP, side.headers);
    }
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? [a, b] : [b, a];
      for (const side of order) (side === a ? ra : rb).push(measure(side));
    }
    return [median(ra), median(rb)];
  };
  const expires = Math.floor(Date.now() / 1000) + 365 * 86_400;
  const pairs: { label: string; object: string; base: string; other: string; rows: [Measured, Measured] }[] = [];
  for (const size of SECTIONS.has('pairs') ? ['1k', '100k'] : []) {
    const signed = signPath({ path: `/${size}`, expires, secret: BENCH_SIGNING_SECRET });
    const rows = await measurePair(
      { name: 'agent, plain hit', port: AGENT_PORT, host: 'bench.local', path: `/${size}` },
      { name: 'agent, policies', port: AGENT_PORT, host: 'policy.local', path: signed },
    );
    pairs.push({ label: 'policies', object: size, base: 'agent plain hit', other: 'agent hit with signing key + 1,000 IP rules + header policy', rows });
    console.log(`${size.padEnd(5)} policies: plain ${rows[0].rps.toFixed(0)} req/s ${rows[0].cpuUsPerRequest.toFixed(2)} µs CPU, with policies ${rows[1].rps.toFixed(0)} req/s ${rows[1].cpuUsPerRequest.toFixed(2)} µs CPU (cost ${(rows[1].cpuUsPerRequest / rows[0].cpuUsPerRequest).toFixed(3)}×)`);
  }
  // The policy line's parts on their own (1 KiB): which of them the cost comes from.
  for (const part of SECTIONS.has('pairs') ? [
    { host: 'sig.local', path: signPath({ path: '/1k', expires, secret: BENCH_SIGNING_SECRET }), what: 'agent hit with the signing key only' },
    { host: 'ip.local', path: '/1k', what: 'agent hit with the 1,000 IP rules only' },
    { host: 'hdr.local', path: '/1k', what: 'agent hit with the header policy only' },
  ] : []) {
    const rows = await measurePair(
      { name: 'agent, plain hit', port: AGENT_PORT, host: 'bench.local', path: '/1k' },
      { name: part.what, port: AGENT_PORT, host: part.host, path: part.path },
    );
    pairs.push({ label: 'policy part', object: '1k', base: 'agent plain hit', other: part.what, rows });
    console.log(`1k    ${part.what}: cost ${(rows[1].cpuUsPerRequest / rows[0].cpuUsPerRequest).toFixed(3)}×`);
  }
  // Prefix tokens against today's signed URL on the same endpoint, each token repeated (verified once, then
  // remembered): the check's cost in each of the three places the edge reads a token from (goal: within 3 %).
  const prefixToken = signPrefixToken({ secret: BENCH_SIGNING_SECRET, acl: '/*', expires });
  for (const form of SECTIONS.has('pairs') || SECTIONS.has('prefix') ? [
    { what: 'prefix token in the query', path: `/1k?token=${prefixToken}` },
    { what: 'prefix token in a cookie', path: '/1k', headers: { Cookie: `token=${prefixToken}` } },
    // The control for the cookie form: the same signed URL carrying a cookie of the same length that no policy reads,
    // so what a Cookie field costs Node apart from the token check shows on its own.
    { what: 'signed URL and an unread cookie of the cookie form\'s length', path: signPath({ path: '/1k', expires, secret: BENCH_SIGNING_SECRET }), headers: { Cookie: `other=${'x'.repeat(prefixToken.length)}` } },
    { what: 'prefix token in a path segment', path: pathWithToken('/1k', 'token', prefixToken) },
  ] : []) {
    const rows = await measurePair(
      { name: 'agent, signed URL', port: AGENT_PORT, host: 'sig.local', path: signPath({ path: '/1k', expires, secret: BENCH_SIGNING_SECRET }) },
      { name: `agent, ${form.what}`, port: AGENT_PORT, host: 'sig.local', path: form.path, headers: form.headers },
    );
    pairs.push({ label: 'prefix token', object: '1k', base: 'agent hit with a signed URL (signing key only)', other: `agent hit with a ${form.what}`, rows });
    console.log(`1k    ${form.what}: ${(rows[1].cpuUsPerRequest / rows[0].cpuUsPerRequest).toFixed(3)}× the signed URL's CPU per request`);
  }
  const compressedHeads: string[] = [];
  for (const size of SECTIONS.has('pairs') ? ['1k.txt', '100k.txt'] : []) {
    for (const coding of ['gzip', 'br']) {
      const ae = { 'Accept-Encoding': coding };
      await waitFor(`http://127.0.0.1:${AGENT_PORT}/${size}`, 'gz.local', ae);
      const ha = await responseHead(AGENT_PORT, 'gz.local', `/${size}`, `Accept-Encoding: ${coding}\r\n`);
      const hp = await responseHead(PLAIN_PORT, 'plain.local', `/${size}`, `Accept-Encoding: ${coding}\r\n`);
      compressedHeads.push(`${size} ${coding}: agent ${ha.fields} fields, ${ha.bytes} bytes; plain ${hp.fields} fields, ${hp.bytes} bytes`);
      const rows = await measurePair(
        { name: `plain node:http, ${coding} bytes`, port: PLAIN_PORT, host: 'plain.local', path: `/${size}`, headers: ae },
        { name: `agent, ${coding} hit`, port: AGENT_PORT, host: 'gz.local', path: `/${size}`, headers: ae },
      );
      pairs.push({ label: coding, object: size, base: `plain node:http sending the same ${coding} bytes`, other: `agent ${coding} hit (stored variant)`, rows });
      console.log(`${size.padEnd(9)} ${coding}: plain ${rows[0].rps.toFixed(0)} req/s ${rows[0].cpuUsPerRequest.toFixed(2)} µs CPU, agent ${rows[1].rps.toFixed(0)} req/s ${rows[1].cpuUsPerRequest.toFixed(2)} µs CPU`);
    }
    const rows = await measurePair(
      { name: 'agent, identity hit', port: AGENT_PORT, host: 'gz.local', path: `/${size}` },
      { name: 'agent, gzip hit', port: AGENT_PORT, host: 'gz.local', path: `/${size}`, headers: { 'Accept-Encoding': 'gzip' } },
    );
    pairs.push({ label: 'gzip vs identity', object: size, base: 'agent identity hit of the text', other: 'agent gzip hit of the same text', rows });
  }

  // The edge at full size (issue 23): workers, HTTPS, HTTP/2, each with the server's CPU time per request (all its processes).
  // Measured last: after TLS and HTTP/2 traffic the 1-worker agent's heap has grown (about +100-170 MB RSS, kept), and its
  // plain hits then cost 15-35 % more CPU, which would bias the policy and compression pairs measured on the same process.
  interface FullRow { label: string; server: 'agent' | 'agent2' | 'nginx' | 'plainTls' | 'plainH2'; rps: number; latencyMs: number; latencyKind: string; cpuUs: number }
  const fullSize: Record<string, FullRow[]> = {};
  await waitFor(`http://127.0.0.1:${AGENT2_PORT}/1k`, 'bench.local');
  const pidOfServer = { agent: agentPid, agent2: agent2.pid!, nginx: nginxPid, plainTls: plainTlsPid, plainH2: plainH2Pid };
  await waitForPort(PLAIN_TLS_PORT);
  await waitForPort(PLAIN_H2_PORT);
  interface FullCase { label: string; server: FullRow['server']; run: (seconds: number) => Result; latencyKind: string }
  const once = (c: FullCase): Measured => {
    const before = treeCpuMs(pidOfServer[c.server]);
    const r = c.run(DURATION);
    return { ...r, cpuUsPerRequest: ((treeCpuMs(pidOfServer[c.server]) - before) * 1000) / Math.max(1, r.requests) };
  };
  for (const size of SECTIONS.has('full') ? ['1k', '100k'] : []) {
    const https = `https://localhost:${AGENT_TLS_PORT}/${size}`;
    const nginxHttps = `https://localhost:${NGINX_TLS_PORT}/${size}`;
    const cases: FullCase[] = [
      { label: 'agent, 1 worker (HTTP/1.1)', server: 'agent', run: (sec) => wrk(`http://127.0.0.1:${AGENT_PORT}/${size}`, 'bench.local', sec), latencyKind: 'p50' },
      { label: 'agent, 2 workers (HTTP/1.1)', server: 'agent2', run: (sec) => wrk(`http://127.0.0.1:${AGENT2_PORT}/${size}`, 'bench.local', sec), latencyKind: 'p50' },
      { label: 'agent, HTTPS/1.1', server: 'agent', run: (sec) => wrk(https, 'localhost', sec), latencyKind: 'p50' },
      { label: 'nginx, HTTPS/1.1', server: 'nginx', run: (sec) => wrk(nginxHttps, 'localhost', sec), latencyKind: 'p50' },
      { label: 'agent, HTTP/2 (h2load)', server: 'agent', run: (sec) => h2load(https, sec), latencyKind: 'mean' },
      { label: 'agent, HTTPS/1.1 (h2load --h1)', server: 'agent', run: (sec) => h2load(https, sec, true), latencyKind: 'mean' },
      { label: 'nginx, HTTP/2 (h2load)', server: 'nginx', run: (sec) => h2load(nginxHttps, sec), latencyKind: 'mean' },
      { label: 'plain node:https, HTTPS/1.1', server: 'plainTls', run: (sec) => wrk(`https://localhost:${PLAIN_TLS_PORT}/${size}`, 'localhost', sec), latencyKind: 'p50' },
      { label: 'plain node:http2, HTTP/2 (h2load)', server: 'plainH2', run: (sec) => h2load(`https://localhost:${PLAIN_H2_PORT}/${size}`, sec), latencyKind: 'mean' },
    ];
    for (const c of cases) c.run(WARMUP);
    // ROUNDS rounds, the order rotating each round; medians.
    const runs = cases.map((): Measured[] => []);
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < cases.length; i++) {
        const k = (i + round) % cases.length;
        runs[k]!.push(once(cases[k]!));
      }
    }
    fullSize[size] = cases.map((c, k) => {
      const m = median(runs[k]!);
      console.log(`full size ${size.padEnd(5)} ${c.label.padEnd(34)} ${m.rps.toFixed(0).padStart(8)} req/s  ${c.latencyKind} ${m.p50.toFixed(2)} ms  ${m.cpuUsPerRequest.toFixed(1)} µs CPU/req`);
      return { label: c.label, server: c.server, rps: m.rps, latencyMs: m.p50, latencyKind: c.latencyKind, cpuUs: m.cpuUsPerRequest };
    });
  }

  const lines: string[] = [];
  lines.push(`## ${new Date().toISOString()} — load ${loadStart} at the start, ${loadAverage()} at the end; Node ${process.version}`, '',
    `wrk -t1 -c${CONNECTIONS}, ${DURATION} s per measurement after ${WARMUP} s warm-up; servers pinned to core 0, wrk to core 1; one worker each; each server measured ${ROUNDS} times, the order rotating each round, medians. The benchmark itself keeps about 2 runnable (a server and its load generator), so a load average near 2 is the run alone. CPU µs/req is the server's CPU time (every thread of every process: nginx's master and worker) per request served: the cost of a hit, which load elsewhere on the host disturbs far less than req/s.`, '', `Response heads (1 KiB hit): ${heads.join('; ')}.`, '');
  if (!SECTIONS.has('main') || !SECTIONS.has('pairs') || !SECTIONS.has('full') || SECTIONS.has('prefix')) lines.push(`A partial run: sections ${[...SECTIONS].join(', ')} only.`, '');
  if (SECTIONS.has('main')) {
    lines.push('| object | server | req/s | p50 ms | p99 ms | CPU µs/req |', '|---|---|---:|---:|---:|---:|');
    for (const size of Object.keys(results)) for (const [name, r] of Object.entries(results[size])) lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${name} | ${r.rps.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.cpuUsPerRequest.toFixed(1)} |`);
    lines.push('', '| object | agent / plain node (req/s) | agent / nginx (req/s) | nginx ÷ agent CPU µs/req (hits per core vs nginx) | agent p99 / plain p99 | goal met (≥ 0.90, ≤ 1.5×) |', '|---|---:|---:|---:|---:|---|');
    for (const size of Object.keys(results)) {
      const a = results[size]['edge agent'], p = results[size]['plain node:http'], n = results[size]['nginx proxy_cache'];
      const ok = a.rps / p.rps >= 0.9 && a.p99 / p.p99 <= 1.5;
      lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${(a.rps / p.rps).toFixed(2)} | ${(a.rps / n.rps).toFixed(2)} | ${(n.cpuUsPerRequest / a.cpuUsPerRequest).toFixed(2)} | ${(a.p99 / p.p99).toFixed(2)} | ${ok ? 'yes' : 'no'} |`);
    }
  }
  const row = (size: string, label: string) => fullSize[size]!.find((r) => r.label === label)!;
  if (SECTIONS.has('full')) {
    lines.push('', '### The edge at full size: workers, HTTPS, HTTP/2 (issue 23)', '',
      `Same run, each case measured ${ROUNDS} times, the order rotating each round, medians. wrk -t1 -c${CONNECTIONS} for HTTP/1.1 (plain and over TLS, keep-alive), h2load -t1 -c16 -m4 for HTTP/2 (64 streams) and -c16 -m1 --h1 for HTTPS/1.1 in the same tool; ${DURATION} s each after ${WARMUP} s of warm-up; the HTTPS clients connect to localhost, the name they send as SNI. The agent with 1 worker, nginx (one worker) and the load generators are placed as above (server on core 0, load generator on core 1). **The agent with 2 workers runs on both cores** (its primary and two worker processes, SO_REUSEPORT), so it shares core 1 with the load generator: on this 2-core machine its req/s is bounded by what wrk leaves of core 1 and cannot show the doubling a machine with spare cores would; its CPU per request (all three processes) is the comparable figure. The self-signed certificate is ECDSA P-256; both servers negotiate TLS 1.3 with the same client. CPU µs/req is every process of the server (the agent's workers and primary, nginx's master and worker).`, '');
    lines.push('| object | server | req/s | latency ms | CPU µs/req |', '|---|---|---:|---:|---:|');
    for (const size of Object.keys(fullSize)) for (const r of fullSize[size]!) lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${r.label} | ${r.rps.toFixed(0)} | ${r.latencyMs.toFixed(2)} (${r.latencyKind}) | ${r.cpuUs.toFixed(1)} |`);
    lines.push('', '| object | 2 workers ÷ 1 worker (req/s; CPU/req) | agent HTTPS ÷ agent plain (req/s) | agent HTTPS ÷ nginx HTTPS (req/s; CPU/req) | agent h2 ÷ nginx h2 (req/s; CPU/req) | agent h2 ÷ agent HTTPS/1.1 in h2load (req/s) |', '|---|---:|---:|---:|---:|---:|');
    for (const size of Object.keys(fullSize)) {
      const one = row(size, 'agent, 1 worker (HTTP/1.1)'), two = row(size, 'agent, 2 workers (HTTP/1.1)');
      const tls = row(size, 'agent, HTTPS/1.1'), nginxTls = row(size, 'nginx, HTTPS/1.1');
      const h2 = row(size, 'agent, HTTP/2 (h2load)'), h1 = row(size, 'agent, HTTPS/1.1 (h2load --h1)'), nginxH2 = row(size, 'nginx, HTTP/2 (h2load)');
      const r = (a: number, b: number) => (a / b).toFixed(2);
      lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${r(two.rps, one.rps)}; ${r(two.cpuUs, one.cpuUs)} | ${r(tls.rps, one.rps)} | ${r(tls.rps, nginxTls.rps)}; ${r(tls.cpuUs, nginxTls.cpuUs)} | ${r(h2.rps, nginxH2.rps)}; ${r(h2.cpuUs, nginxH2.cpuUs)} | ${r(h2.rps, h1.rps)} |`);
    }
    // What Node itself costs over TLS, and what the agent adds to it (issue 34's goals, CPU per request).
    lines.push('', '| object | agent ÷ plain node:https, HTTPS/1.1 (CPU/req) | plain node:https ÷ nginx (CPU/req) | agent ÷ plain node:http2, HTTP/2 (CPU/req) | plain node:http2 ÷ nginx (CPU/req) |', '|---|---:|---:|---:|---:|');
    for (const size of Object.keys(fullSize)) {
      const tls = row(size, 'agent, HTTPS/1.1'), nginxTls = row(size, 'nginx, HTTPS/1.1'), plainTls = row(size, 'plain node:https, HTTPS/1.1');
      const h2 = row(size, 'agent, HTTP/2 (h2load)'), nginxH2 = row(size, 'nginx, HTTP/2 (h2load)'), plainH2 = row(size, 'plain node:http2, HTTP/2 (h2load)');
      const r = (a: number, b: number) => (a / b).toFixed(2);
      lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${r(tls.cpuUs, plainTls.cpuUs)} | ${r(plainTls.cpuUs, nginxTls.cpuUs)} | ${r(h2.cpuUs, plainH2.cpuUs)} | ${r(plainH2.cpuUs, nginxH2.cpuUs)} |`);
    }
    const tls1 = row('1k', 'agent, HTTPS/1.1'), h21 = row('1k', 'agent, HTTP/2 (h2load)');
    const goal = (x: number, g: number) => `${x.toFixed(2)}× (${x <= g ? 'met' : 'not met'})`;
    lines.push('', `Goals (CPU per request, 1 KiB). HTTPS/1.1: ≤ 1.1× nginx ${goal(tls1.cpuUs / row('1k', 'nginx, HTTPS/1.1').cpuUs, 1.1)}, ≤ 1.1× plain node:https ${goal(tls1.cpuUs / row('1k', 'plain node:https, HTTPS/1.1').cpuUs, 1.1)}. HTTP/2: ≤ 1.3× nginx ${goal(h21.cpuUs / row('1k', 'nginx, HTTP/2 (h2load)').cpuUs, 1.3)}, ≤ 1.1× plain node:http2 ${goal(h21.cpuUs / row('1k', 'plain node:http2, HTTP/2 (h2load)').cpuUs, 1.1)}.`);
  }
  const agentOf = (size: string) => results[size]!['edge agent']!, nginxOf = (size: string) => results[size]!['nginx proxy_cache']!;
  const byRps = (size: string) => agentOf(size).rps / nginxOf(size).rps;
  const byCpu = (size: string) => nginxOf(size).cpuUsPerRequest / agentOf(size).cpuUsPerRequest;
  const verdict = (x: number, goal: number) => `${x.toFixed(2)}× (${x >= goal ? 'met' : 'not met'})`;
  const copyOf = (size: string) => results[size]!['nginx proxy_cache, sendfile off']!;
  const plainOf = (size: string) => results[size]!['plain node:http']!;
  if (SECTIONS.has('main')) {
    lines.push('', `nginx sends a cached body with sendfile (the kernel reads the page cache; no copy through user space), which Node cannot do for a body in memory (a socket write copies it into the kernel). For comparison, the same nginx with sendfile off copies like Node: the agent ÷ nginx without sendfile is ${(agentOf('100k').rps / copyOf('100k').rps).toFixed(2)}× by req/s and ${(copyOf('100k').cpuUsPerRequest / agentOf('100k').cpuUsPerRequest).toFixed(2)}× per core at 100 KiB (${(agentOf('1k').rps / copyOf('1k').rps).toFixed(2)}× and ${(copyOf('1k').cpuUsPerRequest / agentOf('1k').cpuUsPerRequest).toFixed(2)}× at 1 KiB); plain node:http ÷ nginx with sendfile ${(plainOf('100k').rps / nginxOf('100k').rps).toFixed(2)}× by req/s at 100 KiB.`);
    const twoWorkers = SECTIONS.has('full') ? `; the agent with 2 workers (both cores, one shared with wrk) against nginx's one worker (core 0) by req/s ${verdict(row('1k', 'agent, 2 workers (HTTP/1.1)').rps / nginxOf('1k').rps, 1)}` : '';
    lines.push('', `Goals. 100 KiB hits at least 0.9× nginx: by req/s (one core each) ${verdict(byRps('100k'), 0.9)}, by hits per core (nginx's CPU µs/req ÷ the agent's) ${verdict(byCpu('100k'), 0.9)}. 1 KiB hits at or above nginx's single worker: one agent worker by req/s ${verdict(byRps('1k'), 1)}, per core ${verdict(byCpu('1k'), 1)}${twoWorkers}.`, '');
  }

  if (SECTIONS.has('pairs') || SECTIONS.has('prefix')) {
    lines.push('', `### Edge policies and compressed hits`, '', `Each pair measured back to back in ${ROUNDS} rounds of ${DURATION} s, the two sides alternating; medians. The policy endpoint checks one signed URL (HMAC-SHA256; the agent remembers verified signatures, so a repeated URL skips the HMAC — each new token pays it once, 3-4 µs), walks 1,000 IP block rules (none matches) and applies a headers policy (4 security headers, 1 custom header). Compressed objects are text (about 3-4× compressible); the plain server sends bytes encoded once at start with the same head. Heads: ${compressedHeads.join('; ')}.`, '');
    lines.push('CPU µs/req is the server process\'s CPU time (schedstat) per request served, the cost of a hit; "cost" is measured ÷ baseline of it (the policy goal: under 1.15×). req/s and p99 move with whatever else runs on the host.', '');
    lines.push('| object | baseline | measured | baseline CPU µs/req | measured CPU µs/req | cost (CPU ratio) | baseline req/s | measured req/s | baseline p99 ms | measured p99 ms |', '|---|---|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const p of pairs) lines.push(`| ${p.object} | ${p.base} | ${p.other} | ${p.rows[0].cpuUsPerRequest.toFixed(2)} | ${p.rows[1].cpuUsPerRequest.toFixed(2)} | ${(p.rows[1].cpuUsPerRequest / p.rows[0].cpuUsPerRequest).toFixed(3)} | ${p.rows[0].rps.toFixed(0)} | ${p.rows[1].rps.toFixed(0)} | ${p.rows[0].p99.toFixed(2)} | ${p.rows[1].p99.toFixed(2)} |`);
  }
  const text = lines.join('\n') + '\n';
  console.log('\n' + text);
  // Newest run first, the earlier runs kept below it.
  mkdirSync(join(here, 'results'), { recursive: true });
  const file = join(here, 'results', 'edge-cache-hit.md');
  const previous = existsSync(file) ? readFileSync(file, 'utf8').replace(/^# .*\n\n/, '') : '';
  writeFileSync(file, `# Edge cache-hit benchmark (bench/edge-cache-hit.ts)\n\n${text}\n${previous}`);
  cleanup();
  rmSync(work, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
  cleanup(); // the servers' handles would keep this process running
});
