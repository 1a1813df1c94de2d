// Log drains at the edge (issue 24 "Done means"), two measurements in one run:
//
// 1. What logging costs cache hits: one agent process (pinned to core 0) serves
//    bench.local (no drain), logged.local (the same, with one ndjson http drain
//    of the spec's sample fields to a local receiver) and full.local (every
//    field); wrk (core 1) goes round the three, --rounds times --duration
//    seconds after a warm-up. Measured: req/s, and the agent's CPU time per
//    request (/proc). The goal, logged ≥ 0.90 × plain, is judged on CPU per
//    request: on this 2-core host the receiver shares wrk's core, so with a
//    drain wrk itself slows down and req/s understates the agent.
// 2. Records one agent core ships: a drain (the agent's own code: render,
//    buffer, batch, http client) in this process, pinned to core 0, given
//    --records access records as fast as it takes them; the receiver (core 1)
//    counts what arrives. Goal: ≥ 50,000 records a second.
//
// Results are printed and added to bench/results/log-drains.md (newest first).
// Run: node bench/log-drains.ts [--duration 8] [--warmup 3] [--rounds 3] [--records 500000]
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os, { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { Drain, defaultLimits } from '../edge-agent/src/logs/drain.ts';
import { syntheticRecord, type AccessRecord } from '../shared/src/logs/access-record.ts';
import { numberFlag } from './lib/cli.ts';
import { cpuMsOf } from './lib/stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const DURATION = numberFlag('duration', 8);
const WARMUP = numberFlag('warmup', 3);
const ROUNDS = numberFlag('rounds', 3);
const RECORDS = numberFlag('records', 500_000);
const ORIGIN_PORT = 18831, AGENT_PORT = 18832, RECEIVER_PORT = 18833, SHIP_RECEIVER_PORT = 18834;
const children: ChildProcess[] = [];
const pin = (core: number, cmd: string[]) => (existsSync('/usr/bin/taskset') ? ['taskset', '-c', String(core), ...cmd] : cmd);
const start = (cmd: string[]) => {
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(child);
  return child;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Waits for a 200 (fetch cannot set Host: node:http can). */
async function waitFor(url: string, host?: string): Promise<void> {
  const ok = () => new Promise<boolean>((resolve) => {
    const req = http.get(url, { headers: host ? { host } : {}, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false)).on('timeout', () => req.destroy());
  });
  for (let i = 0; i < 200; i++) {
    if (await ok()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} never answered`);
}

let agentPid = 0;

/** One wrk run: req/s, and the agent's CPU microseconds per request over it. */
function wrk(host: string, seconds: number): { rps: number; cpuUs: number } {
  const lua = join(tmpdir(), `wrk-logs-${process.pid}.lua`);
  writeFileSync(lua, `wrk.headers["Host"] = "${host}"\n`);
  const cmd = pin(1, ['wrk', '-t1', '-c64', `-d${seconds}s`, '-s', lua, `http://127.0.0.1:${AGENT_PORT}/1k`]);
  const cpu0 = cpuMsOf(agentPid);
  const out = execFileSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8' });
  const cpuMs = cpuMsOf(agentPid) - cpu0;
  if (/Non-2xx/.test(out)) throw new Error(`non-2xx answers:\n${out}`);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0), cpuUs: (cpuMs * 1000) / Math.max(1, requests) };
}

type Run = { rps: number; cpuUs: number };

async function overhead(): Promise<{ plain: Run[]; logged: Run[]; full: Run[]; shipped: number }> {
  const node = process.execPath;
  start([node, join(here, 'lib/plain-server.ts'), String(ORIGIN_PORT)]);
  start(pin(1, [node, join(here, 'lib/log-receiver.ts'), String(RECEIVER_PORT)]));
  agentPid = start(pin(0, [node, join(here, 'lib/logging-agent-server.ts'), String(AGENT_PORT), String(ORIGIN_PORT), String(RECEIVER_PORT), mkdtempSync(join(tmpdir(), 'logs-bench-'))])).pid!;
  await waitFor(`http://127.0.0.1:${RECEIVER_PORT}/count`);
  for (const host of ['bench.local', 'logged.local', 'full.local']) await waitFor(`http://127.0.0.1:${AGENT_PORT}/1k`, host);
  for (const host of ['bench.local', 'logged.local', 'full.local']) wrk(host, WARMUP);
  const plain: Run[] = [];
  const logged: Run[] = [];
  const full: Run[] = [];
  const show = (r: Run) => `${r.rps.toFixed(0)} req/s ${r.cpuUs.toFixed(1)} µs/req`;
  for (let r = 0; r < ROUNDS; r++) {
    plain.push(wrk('bench.local', DURATION));
    logged.push(wrk('logged.local', DURATION));
    full.push(wrk('full.local', DURATION));
    console.log(`round ${r + 1}: plain ${show(plain.at(-1)!)}; sample fields ${show(logged.at(-1)!)}; every field ${show(full.at(-1)!)}`);
  }
  await new Promise((r) => setTimeout(r, 3_000));
  const count = await (await fetch(`http://127.0.0.1:${RECEIVER_PORT}/count`)).json() as { records: number };
  return { plain, logged, full, shipped: count.records };
}

async function shipping(): Promise<{ seconds: number; perSecond: number; received: number }> {
  try {
    execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' });
  } catch { /* not pinned */ }
  start(pin(1, [process.execPath, join(here, 'lib/log-receiver.ts'), String(SHIP_RECEIVER_PORT)]));
  await waitFor(`http://127.0.0.1:${SHIP_RECEIVER_PORT}/count`);
  const drain = new Drain({
    id: 'ship', destination_type: 'http', log_format: 'ndjson', fields: [], status: 'active',
    destination_config: { url: `http://127.0.0.1:${SHIP_RECEIVER_PORT}/ingest`, allow_private_network: true },
  }, { ...defaultLimits('http', 1024 * 1024 * 1024), flushIntervalMs: 50 }, { nodeName: 'bench-edge' }, pino({ level: 'silent' }));
  const base = syntheticRecord('bench-edge');
  const started = performance.now();
  for (let i = 0; i < RECORDS; i++) {
    const r: AccessRecord = { ...base, timestamp: Date.now(), request_id: crypto.randomUUID(), path: `/asset/${i % 1000}.js`, bytes_sent: 1024 + (i % 100) };
    drain.push(r);
    // Let the sends run between slices, as requests do.
    if (i % 5_000 === 4_999) await new Promise((resolve) => setImmediate(resolve));
  }
  await drain.flush(120_000);
  const seconds = (performance.now() - started) / 1000;
  const received = ((await (await fetch(`http://127.0.0.1:${SHIP_RECEIVER_PORT}/count`)).json()) as { records: number }).records;
  drain.close();
  return { seconds, perSecond: received / seconds, received };
}

try {
  const o = await overhead();
  const rps = (runs: Run[]) => median(runs.map((r) => r.rps));
  const cpu = (runs: Run[]) => median(runs.map((r) => r.cpuUs));
  // Throughput a core would give is 1 / CPU per request: the ratio of those is the cost.
  const ratio = cpu(o.plain) / cpu(o.logged);
  const ratioFull = cpu(o.plain) / cpu(o.full);
  const ship = await shipping();
  const lines = [
    `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} — load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; Node ${process.version}`, '',
    `- Cache hits (1 KiB, wrk -t1 -c64, ${ROUNDS} × ${DURATION} s each, in turn; agent on core 0, wrk and the receiver on core 1): `
      + `plain ${rps(o.plain).toFixed(0)} req/s, ${cpu(o.plain).toFixed(2)} µs of agent CPU per request; with one ndjson http drain of the spec's sample fields `
      + `${rps(o.logged).toFixed(0)} req/s, ${cpu(o.logged).toFixed(2)} µs; of every field ${rps(o.full).toFixed(0)} req/s, ${cpu(o.full).toFixed(2)} µs (medians). `
      + `Throughput per agent core with the drain: **${ratio.toFixed(3)}** × without (goal ≥ 0.90: ${ratio >= 0.9 ? 'met' : 'NOT met'}); every field ${ratioFull.toFixed(3)} ×. `
      + `req/s ratios (wrk's core shared with the receiver): ${(rps(o.logged) / rps(o.plain)).toFixed(3)} and ${(rps(o.full) / rps(o.plain)).toFixed(3)}. The receiver got ${o.shipped} records. `
      + `Per round, plain ÷ sample-fields CPU per request: ${o.plain.map((p, i) => (p.cpuUs / o.logged[i]!.cpuUs).toFixed(2)).join(', ')} (a spread this wide is the host's load, not the code).`,
    `- Shipping (one drain on one core, ${RECORDS} records of every field, rendered, batched and posted to a local receiver on the other core): `
      + `${ship.received} records in ${ship.seconds.toFixed(2)} s, **${Math.round(ship.perSecond)} records/s** (goal ≥ 50,000: ${ship.perSecond >= 50_000 ? 'met' : 'NOT met'}).`,
    '', '',
  ].join('\n');
  console.log(lines);
  const file = join(here, 'results', 'log-drains.md');
  const previous = existsSync(file) ? readFileSync(file, 'utf8').replace(/^# .*\n\n/, '') : '';
  writeFileSync(file, `# Log drains at the edge (bench/log-drains.ts)\n\n${lines}${previous}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
}
