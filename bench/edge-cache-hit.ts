// Cache-hit throughput and latency: the edge agent vs a plain node:http server
// answering the same bytes from memory vs nginx proxy_cache, one worker each,
// 1 KiB and 100 KiB objects. Servers are pinned to core 0, wrk to core 1.
// Then, in the same run: the agent's hits with edge policies active (a signing
// key checked on every request, 1,000 IP rules, a response headers policy)
// against its plain hits, and its compressed hits (gzip and br variants served
// from cache) against the plain server sending the same encoded bytes and
// against its own identity hits of the same text.
// Run: npx node bench/edge-cache-hit.ts [--duration 10] [--warmup 3] [--rounds 2]
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { connect } from 'node:net';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { signPath } from '../shared/src/signing/signed-url.ts';
import { have, numberFlag, pin } from './lib/cli.ts';
import { BENCH_SIGNING_SECRET } from './lib/edge-bench-config.ts';
import { cpuMsOf } from './lib/stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const DURATION = numberFlag('duration', 10);
const WARMUP = numberFlag('warmup', 3);
const CONNECTIONS = numberFlag('connections', 64);
/** Rounds of the policy and compression pairs, alternating the two sides (the median is reported). */
const ROUNDS = numberFlag('rounds', 2);
const ORIGIN_PORT = 18801, PLAIN_PORT = 18802, AGENT_PORT = 18803, NGINX_PORT = 18804;

function ensureTools(): void {
  const missing = ['wrk', 'nginx'].filter((c) => !have(c) && !(c === 'nginx' && have('/usr/sbin/nginx')));
  if (missing.length === 0) return;
  console.log(`installing ${missing.join(', ')} from Debian packages...`);
  execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq wrk nginx-light || apt-get install -y -qq wrk nginx'], { stdio: 'inherit' });
}
const nginxBin = () => (have('nginx') ? 'nginx' : '/usr/sbin/nginx');

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

interface Result { rps: number; p50: number; p99: number; requests: number }

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
  const work = mkdtempSync(join(tmpdir(), 'edge-bench-'));
  const node = process.execPath;
  // Origin (unpinned, only hit during warm-up) and the plain baseline.
  start([node, join(here, 'lib/plain-server.ts'), String(ORIGIN_PORT)]);
  const plainPid = start(pin(0, [node, join(here, 'lib/plain-server.ts'), String(PLAIN_PORT), 'baseline'])).pid!;
  const agentPid = start(pin(0, [node, join(here, 'lib/agent-server.ts'), String(AGENT_PORT), String(ORIGIN_PORT), join(work, 'agent')])).pid!;
  mkdirSync(join(work, 'nginx-cache'), { recursive: true });
  const conf = join(work, 'nginx.conf');
  writeFileSync(conf, `
worker_processes 1;
daemon off;
user root;
pid ${work}/nginx.pid;
error_log ${work}/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 100000;
  proxy_cache_path ${work}/nginx-cache levels=1:2 keys_zone=bench:10m max_size=1g inactive=60m use_temp_path=off;
  client_body_temp_path ${work}/nginx-body; proxy_temp_path ${work}/nginx-proxy; fastcgi_temp_path ${work}/nginx-fcgi; uwsgi_temp_path ${work}/nginx-uwsgi; scgi_temp_path ${work}/nginx-scgi;
  server {
    listen 127.0.0.1:${NGINX_PORT};
    location / {
      proxy_pass http://127.0.0.1:${ORIGIN_PORT};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache bench;
      proxy_cache_valid 200 1h;
      add_header X-Cache-Status $upstream_cache_status;
    }
  }
}
`);
  start(pin(0, [nginxBin(), '-c', conf, '-p', work, '-e', join(work, 'nginx-error.log')]));
  await waitFor(`http://127.0.0.1:${ORIGIN_PORT}/1k`, 'x');
  await waitFor(`http://127.0.0.1:${PLAIN_PORT}/1k`, 'x');
  await waitFor(`http://127.0.0.1:${AGENT_PORT}/1k`, 'bench.local');
  await waitFor(`http://127.0.0.1:${NGINX_PORT}/1k`, 'x');

  const targets = [
    { name: 'plain node:http', port: PLAIN_PORT, host: 'plain.local' },
    { name: 'edge agent', port: AGENT_PORT, host: 'bench.local' },
    { name: 'nginx proxy_cache', port: NGINX_PORT, host: 'nginx.local' },
  ];
  const heads: string[] = [];
  for (const t of targets) {
    const h = await responseHead(t.port, t.host, '/1k');
    heads.push(`${t.name}: ${h.fields} fields, ${h.bytes} bytes`);
  }
  console.log(`response heads (1 KiB): ${heads.join('; ')}`);
  const results: Record<string, Record<string, Result>> = {};
  for (const size of ['1k', '100k']) {
    results[size] = {};
    for (const t of targets) {
      const url = `http://127.0.0.1:${t.port}/${size}`;
      wrk(url, t.host, WARMUP); // warm-up: fills caches, lets V8 optimise
      results[size][t.name] = wrk(url, t.host, DURATION);
      const r = results[size][t.name];
      console.log(`${size.padEnd(5)} ${t.name.padEnd(18)} ${r.rps.toFixed(0).padStart(8)} req/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms`);
    }
  }
  // Policies and compression: each pair measured back to back, sides alternating, ROUNDS times; medians.
  // Besides throughput, each measurement reads the server's CPU time (its threads' schedstat) per request
  // served: what a hit costs the server, which load elsewhere on the host disturbs far less than req/s.
  interface Measured extends Result { cpuUsPerRequest: number }
  const median = (xs: Measured[]): Measured => {
    const by = (k: keyof Measured) => [...xs].sort((a, b) => a[k] - b[k])[Math.floor((xs.length - 1) / 2)]![k];
    return { rps: by('rps'), p50: by('p50'), p99: by('p99'), requests: by('requests'), cpuUsPerRequest: by('cpuUsPerRequest') };
  };
  interface Side { name: string; port: number; host: string; path: string; headers?: Record<string, string> }
  const pidOf = (side: Side) => (side.port === AGENT_PORT ? agentPid : plainPid);
  const measure = (side: Side): Measured => {
    const before = cpuMsOf(pidOf(side));
    const r = wrk(`http://127.0.0.1:${side.port}${side.path}`, side.host, DURATION, side.headers);
    return { ...r, cpuUsPerRequest: ((cpuMsOf(pidOf(side)) - before) * 1000) / Math.max(1, r.requests) };
  };
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
  for (const size of ['1k', '100k']) {
    const signed = signPath({ path: `/${size}`, expires, secret: BENCH_SIGNING_SECRET });
    const rows = await measurePair(
      { name: 'agent, plain hit', port: AGENT_PORT, host: 'bench.local', path: `/${size}` },
      { name: 'agent, policies', port: AGENT_PORT, host: 'policy.local', path: signed },
    );
    pairs.push({ label: 'policies', object: size, base: 'agent plain hit', other: 'agent hit with signing key + 1,000 IP rules + header policy', rows });
    console.log(`${size.padEnd(5)} policies: plain ${rows[0].rps.toFixed(0)} req/s ${rows[0].cpuUsPerRequest.toFixed(2)} µs CPU, with policies ${rows[1].rps.toFixed(0)} req/s ${rows[1].cpuUsPerRequest.toFixed(2)} µs CPU (cost ${(rows[1].cpuUsPerRequest / rows[0].cpuUsPerRequest).toFixed(3)}×)`);
  }
  const compressedHeads: string[] = [];
  for (const size of ['1k.txt', '100k.txt']) {
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

  const lines: string[] = [];
  lines.push(`# Edge cache-hit benchmark`, '', `Run ${new Date().toISOString()}: wrk -t1 -c${CONNECTIONS}, ${DURATION} s per measurement after ${WARMUP} s warm-up; servers pinned to core 0, wrk to core 1; one worker each. Node ${process.version}.`, '', `Response heads (1 KiB hit): ${heads.join('; ')}.`, '');
  lines.push('| object | server | req/s | p50 ms | p99 ms |', '|---|---|---:|---:|---:|');
  for (const size of Object.keys(results)) for (const [name, r] of Object.entries(results[size])) lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${name} | ${r.rps.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} |`);
  lines.push('', '| object | agent / plain node (req/s) | agent / nginx (req/s) | agent p99 / plain p99 | goal met (≥ 0.90, ≤ 1.5×) |', '|---|---:|---:|---:|---|');
  for (const size of Object.keys(results)) {
    const a = results[size]['edge agent'], p = results[size]['plain node:http'], n = results[size]['nginx proxy_cache'];
    const ok = a.rps / p.rps >= 0.9 && a.p99 / p.p99 <= 1.5;
    lines.push(`| ${size === '1k' ? '1 KiB' : '100 KiB'} | ${(a.rps / p.rps).toFixed(2)} | ${(a.rps / n.rps).toFixed(2)} | ${(a.p99 / p.p99).toFixed(2)} | ${ok ? 'yes' : 'no'} |`);
  }
  lines.push('', `## Edge policies and compressed hits`, '', `Each pair measured back to back in ${ROUNDS} rounds of ${DURATION} s, the two sides alternating; medians. The policy endpoint checks one signed URL (HMAC-SHA256; the agent remembers verified signatures, so a repeated URL skips the HMAC — each new token pays it once, 3-4 µs), walks 1,000 IP block rules (none matches) and applies a headers policy (4 security headers, 1 custom header). Compressed objects are text (about 3-4× compressible); the plain server sends bytes encoded once at start with the same head. Heads: ${compressedHeads.join('; ')}.`, '');
  lines.push('CPU µs/req is the server process\'s CPU time (schedstat) per request served, the cost of a hit; "cost" is measured ÷ baseline of it (the policy goal: under 1.15×). req/s and p99 move with whatever else runs on the host.', '');
  lines.push('| object | baseline | measured | baseline CPU µs/req | measured CPU µs/req | cost (CPU ratio) | baseline req/s | measured req/s | baseline p99 ms | measured p99 ms |', '|---|---|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const p of pairs) lines.push(`| ${p.object} | ${p.base} | ${p.other} | ${p.rows[0].cpuUsPerRequest.toFixed(2)} | ${p.rows[1].cpuUsPerRequest.toFixed(2)} | ${(p.rows[1].cpuUsPerRequest / p.rows[0].cpuUsPerRequest).toFixed(3)} | ${p.rows[0].rps.toFixed(0)} | ${p.rows[1].rps.toFixed(0)} | ${p.rows[0].p99.toFixed(2)} | ${p.rows[1].p99.toFixed(2)} |`);
  const text = lines.join('\n') + '\n';
  console.log('\n' + text);
  mkdirSync(join(here, 'results'), { recursive: true });
  writeFileSync(join(here, 'results', 'edge-cache-hit.md'), text);
  cleanup();
  rmSync(work, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
