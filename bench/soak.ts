// Soak: a control-plane process and an edge agent under a steady mixed load
// for several minutes, their resident memory sampled every 5 s. Load:
// viewers through the agent (2,000 objects with a 30 s TTL: hits, expiries
// and refetches), API reads (lists, the purge log, the account), API writes
// (an origin created then deleted), a path purge every 2 s, a login every
// 100 s (the account's budget is 10 per 15 minutes), a configuration change
// published every 15 s. Verdict per process:
// flat when the peak RSS of the last third of the run is within 10% of the
// second third's (the first third is warm-up: caches, pools, JIT). Peaks,
// not means: RSS saws between collections (100 MB and more at a time), and
// whichever phase of the saw a third catches decides its mean; a leak
// raises the peaks (and the live heap's floor, printed beside).
// Results: printed and added to bench/results/soak.md (newest first).
//
//   npm run bench:soak                 # 3 minutes
//   node bench/soak.ts --minutes 10
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDeployment, startEdgeAgent, viewerGet } from '../test/support/edge-deployment.ts';
import { detectServices } from '../test/support/services.ts';
import { publishAndWait, versionedOrigin } from '../test/support/system.ts';
import { startTraffic } from '../test/support/traffic.ts';
import { numberFlag } from './lib/cli.ts';

const MINUTES = numberFlag('minutes', 3);
const SAMPLE_MS = 5000;
/** Growth of the last third's peak RSS over the second third's that still reads flat. */
const FLAT_WITHIN = 0.10;

const services = await detectServices();
if (!services.postgresUrl) {
  console.error('bench:soak needs PostgreSQL (127.0.0.1:5432 or TEST_POSTGRES_URL); Redis is used when reachable');
  process.exit(1);
}

const teardowns: (() => unknown)[] = [];
const t = { teardown: (fn: () => unknown) => teardowns.push(fn) };

/** Resident set size of a process in MB (/proc), or NaN once it is gone. */
function rssMb(pid: number): number {
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The process's JavaScript heap in use, MB, from its Prometheus /metrics (nodejs_heap_size_used_bytes, any prefix). */
async function heapUsedMb(metricsUrl: string): Promise<number> {
  try {
    const text = await (await fetch(metricsUrl, { signal: AbortSignal.timeout(5000) })).text();
    const value = /^\w*nodejs_heap_size_used_bytes(?:\{[^}]*\})?\s+(\S+)/m.exec(text)?.[1];
    return value ? Number(value) / 1024 / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

try {
  const origin = await versionedOrigin(t);
  const deployment = await startDeployment(t, { postgresUrl: services.postgresUrl, env: services.redisUrl ? { REDIS_URL: services.redisUrl } : {} });
  const agent = await startEdgeAgent(t, deployment, deployment.grpcPort, 'edge-soak');
  const o = await deployment.must('POST', '/v1/cdn/origins', { name: 'media', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await deployment.must('POST', '/v1/cdn/endpoints', { name: 'media', default_origin_id: o.id });
  await deployment.must('POST', `/v1/cdn/distributions/${endpoint.id}/cache-rules`, { name: 'media', match: { paths: ['/media/*'] }, ttl_seconds: 30 });
  await publishAndWait(deployment, 'soak', 1);
  const email = (await deployment.process.waitForLine(/^\s+e-mail:\s+(\S+)/))[1]!;
  const password = (await deployment.process.waitForLine(/^\s+password:\s+(\S+)/))[1]!;
  const workers = childrenOf(agent.child.pid!);
  const processes = [
    { name: 'control plane', pid: deployment.process.pid },
    { name: 'agent (primary)', pid: agent.child.pid! },
    ...workers.map((pid, i) => ({ name: `agent (worker ${i + 1})`, pid })),
  ];

  let publishes = 0;
  const started = Date.now();
  const traffic = startTraffic([
    { name: 'viewers', concurrency: 2, pauseMs: 5, send: async (n) => (await viewerGet(agent.port, endpoint.hostname, `/media/${n % 2000}.ts`)).status },
    {
      name: 'api reads', concurrency: 1, pauseMs: 50,
      send: async (n) => (await deployment.api('GET', ['/v1/cdn/endpoints?limit=20', '/v1/cdn/purge?limit=10', '/v1/users/me', '/v1/cdn/edge-nodes'][n % 4]!)).status,
    },
    {
      name: 'api writes', concurrency: 1, pauseMs: 200,
      send: async (n) => {
        const created = await deployment.api('POST', '/v1/cdn/origins', { name: `soak ${n}`, host: '93.184.216.34' });
        if (created.status !== 201) return created.status;
        return (await deployment.api('DELETE', `/v1/cdn/origins/${created.body.id}`)).status;
      },
    },
    { name: 'purges', concurrency: 1, pauseMs: 2000, send: async (n) => (await deployment.api('POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'path', paths: [`/media/${n % 2000}.ts`] })).status },
    {
      name: 'logins', concurrency: 1, pauseMs: 100_000,
      send: async () => (await fetch(`${deployment.process.url}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }), signal: AbortSignal.timeout(15_000) })).status,
    },
    {
      name: 'publishes', concurrency: 1, pauseMs: 15_000,
      send: async (n) => {
        const patched = await deployment.api('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { name: `media ${n}` });
        if (patched.status !== 200) return patched.status;
        const published = await deployment.api('POST', '/v1/cdn/config/publish', { description: `soak ${n}` });
        if (published.status < 300) publishes++;
        return published.status;
      },
    },
  ]);

  const agentMetricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
  const heapOf = [`${deployment.process.url}/metrics`, `http://127.0.0.1:${agentMetricsPort}/metrics`];
  const sample = async () => ({ at: Date.now() - started, rss: processes.map((p) => rssMb(p.pid)), heap: await Promise.all(heapOf.map(heapUsedMb)) });
  const samples: { at: number; rss: number[]; heap: number[] }[] = [];
  const end = started + MINUTES * 60_000;
  console.log(`soak: ${MINUTES} min, sampling ${processes.map((p) => `${p.name} pid ${p.pid}`).join(', ')}`);
  while (Date.now() < end) {
    samples.push(await sample());
    const last = samples.at(-1)!;
    console.log(`${(last.at / 1000).toFixed(0).padStart(4)} s  ${processes.map((p, i) => `${p.name} ${last.rss[i]!.toFixed(1)} MB`).join('  ')}  heap used ${last.heap.map((h) => h.toFixed(1)).join(' / ')} MB`);
    await sleep(SAMPLE_MS);
  }
  samples.push(await sample());
  await traffic.stop();

  const third = Math.floor(samples.length / 3);
  const thirds = [samples.slice(third, 2 * third), samples.slice(2 * third)];
  const verdicts = processes.map((p, i) => {
    const [second, last] = thirds.map((part) => Math.max(...part.map((s) => s.rss[i]!)));
    const [secondMean, lastMean] = thirds.map((part) => mean(part.map((s) => s.rss[i]!)));
    const growth = last! / second! - 1;
    const alive = Number.isFinite(samples.at(-1)!.rss[i]!);
    return { name: p.name, second: second!, last: last!, secondMean: secondMean!, lastMean: lastMean!, growth, flat: alive && growth <= FLAT_WITHIN, alive };
  });
  /** The live heap's floor in each of the last two thirds (what survives collections): a leak raises it. */
  const heapFloors = [0, 1].map((j) => thirds.map((part) => Math.min(...part.map((s) => s.heap[j]!).filter(Number.isFinite))));
  const streams = ['viewers', 'api reads', 'api writes', 'purges', 'logins', 'publishes'].map((name) => {
    const c = traffic.count(name);
    return `| ${name} | ${c.served} | ${c.failed} | ${Object.entries(c.statuses).map(([s, n]) => `${s}: ${n}`).join(', ')} |`;
  });
  const seconds = (Date.now() - started) / 1000;
  const every = Math.max(1, Math.round(30_000 / SAMPLE_MS));
  const lines = [
    `## ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC — ${MINUTES} min`, '',
    `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'CPU'}, Node ${process.version}; load average at the end ${os.loadavg().map((l) => l.toFixed(2)).join(' / ')} (1/5/15 min); `
      + `PostgreSQL${services.redisUrl ? ' and Redis' : ' (no Redis: the in-process store)'} shared with other work on the host. ${publishes} configuration versions published.`, '',
    '| stream | served | failed | statuses |', '|---|---:|---:|---|', ...streams, '',
    `Viewers ${(traffic.count('viewers').served / seconds).toFixed(0)} requests/s on average.`, '',
    `| process | peak RSS 2nd third MB | peak RSS last third MB | growth | mean RSS 2nd / last third MB | verdict (flat: peak growth ≤ ${FLAT_WITHIN * 100}%) |`, '|---|---:|---:|---:|---:|---|',
    ...verdicts.map((v) => `| ${v.name} | ${v.second.toFixed(1)} | ${v.last.toFixed(1)} | ${(v.growth * 100).toFixed(1)}% | ${v.secondMean.toFixed(1)} / ${v.lastMean.toFixed(1)} | ${!v.alive ? '**died**' : v.flat ? 'flat' : '**grows**'} |`), '',
    `Live heap's floor (lowest heap used sampled), 2nd third → last third: control plane ${heapFloors[0]!.map((h) => h.toFixed(1)).join(' → ')} MB, agent ${heapFloors[1]!.map((h) => h.toFixed(1)).join(' → ')} MB.`, '',
    `Samples (MB, every ${every * SAMPLE_MS / 1000} s of the ${SAMPLE_MS / 1000} s samples; heap used from each process's /metrics, what the garbage collector left live at the moment):`, '',
    `| s | ${processes.map((p) => `${p.name} RSS`).join(' | ')} | control plane heap used | agent heap used |`, `|---:|${processes.map(() => '---:').join('|')}|---:|---:|`,
    ...samples.filter((_, i) => i % every === 0 || i === samples.length - 1).map((s) => `| ${(s.at / 1000).toFixed(0)} | ${s.rss.map((r) => r.toFixed(1)).join(' | ')} | ${s.heap.map((h) => h.toFixed(1)).join(' | ')} |`), '',
  ];
  console.log(lines.join('\n'));
  const results = path.join(import.meta.dirname, 'results', 'soak.md');
  const previous = fs.existsSync(results) ? fs.readFileSync(results, 'utf8').replace(/^# .*\n\n/, '') : '';
  fs.writeFileSync(results, `# Soak at steady mixed load (bench/soak.ts, newest first)\n\n${lines.join('\n')}\n${previous}`);
  process.exitCode = verdicts.every((v) => v.flat) ? 0 : 1;
} finally {
  for (const fn of teardowns.reverse()) await fn();
}
