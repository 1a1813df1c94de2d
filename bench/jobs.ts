// Background-job throughput: how many jobs per second the job mechanism
// (control-plane/src/jobs/) claims, runs and settles, so capabilities know
// the budget. The handler does nothing: the figures are the mechanism's own
// cost (claim statement, settle statement, lease bookkeeping).
//
//   PostgreSQL, 1 and 2 worker processes   each a JobQueue loop (concurrency 4, poll 20 ms)
//                                          in its own process, on a fresh sp_bench_jobs_* database
//   embedded PGlite, 1 worker in-process   the same loop on the single pooled connection
//   PGlite idle                            statements per minute an idle worker sends with the
//                                          default poll (JOBS_POLL_MS=1000)
//
// Jobs are inserted in one statement once the workers are ready; the clock
// runs from that insert until the last job is settled.
// Run: npm run bench:jobs -- [--jobs 5000] [--concurrency 4] [--idle-seconds 10]
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import pg from 'pg';
import { z } from 'zod';
import { systemClock } from '../control-plane/src/core/clock.ts';
import { openDatabase, type Database } from '../control-plane/src/db/orm.ts';
import { JobQueue, jobsFor } from '../control-plane/src/jobs/index.ts';
import { numberFlag } from './lib/cli.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const JOBS = numberFlag('jobs', 5000);
const CONCURRENCY = numberFlag('concurrency', 4);
const IDLE_SECONDS = numberFlag('idle-seconds', 10);
const PG_ADMIN = process.env.BENCH_POSTGRES_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';

const noop = jobsFor<unknown>()({ type: 'bench.noop', payload: z.object({ n: z.number() }), handler: async () => {} });
const silent = pino({ level: 'silent' });

function queueOn(db: Database, pollMs: number): JobQueue {
  const queue = new JobQueue({ db, log: silent, clock: systemClock, services: { db, log: silent }, pollMs, concurrency: CONCURRENCY, shutdownTimeoutMs: 5_000 });
  queue.register([noop]);
  return queue;
}

// ---- child mode: one worker process ------------------------------------------

if (process.argv[2] === '--worker') {
  const db = await openDatabase({ databaseUrl: process.argv[3], dataDir: os.tmpdir(), poolMax: CONCURRENCY + 1 });
  const queue = queueOn(db, 20);
  queue.start();
  console.log('ready');
  process.once('SIGTERM', () => void queue.stop().then(() => db.close()).then(() => process.exit(0)));
} else {
  await main();
}

// ---- the benchmark -----------------------------------------------------------

async function insertJobs(db: Database, count: number): Promise<void> {
  await db.orm.em.fork().execute(
    `insert into job (id, type, payload, state, run_at, attempts, max_attempts, lease_ms, created_at, updated_at)
     select gen_random_uuid(), 'bench.noop', jsonb_build_object('n', i), 'queued', now(), 0, 5, 300000, now(), now()
     from generate_series(1, ?) as i`,
    [count],
  );
}

async function settled(db: Database): Promise<number> {
  const [row] = await db.orm.em.fork().execute(`select count(*)::int as n from job where type = 'bench.noop' and state = 'succeeded'`);
  return row.n;
}

async function waitUntilSettled(db: Database, count: number): Promise<void> {
  while ((await settled(db)) < count) await new Promise((resolve) => setTimeout(resolve, 20));
}

async function startWorker(url: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [path.join(here, 'jobs.ts'), '--worker', url, '--concurrency', String(CONCURRENCY)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { if (chunk.includes('ready')) resolve(); });
    child.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
  });
  return child;
}

async function onPostgres(workers: number): Promise<number> {
  const name = `sp_bench_jobs_${process.pid}_${workers}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(PG_ADMIN);
  url.pathname = `/${name}`;
  const db = await openDatabase({ databaseUrl: url.toString(), dataDir: os.tmpdir(), poolMax: 2 });
  const children: ChildProcess[] = [];
  try {
    for (let i = 0; i < workers; i++) children.push(await startWorker(url.toString()));
    const started = performance.now();
    await insertJobs(db, JOBS);
    await waitUntilSettled(db, JOBS);
    return JOBS / ((performance.now() - started) / 1000);
  } finally {
    for (const child of children) child.kill('SIGTERM');
    await Promise.all(children.map((c) => new Promise((resolve) => (c.exitCode !== null ? resolve(null) : c.once('exit', resolve)))));
    await db.close();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

async function onPglite(): Promise<{ rate: number; idlePerMinute: number }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sp-bench-jobs-'));
  let statements = 0;
  const db = await openDatabase({ dataDir: dir, onQuery: () => statements++ });
  try {
    const queue = queueOn(db, 20);
    queue.start();
    const started = performance.now();
    await insertJobs(db, JOBS);
    await waitUntilSettled(db, JOBS);
    const rate = JOBS / ((performance.now() - started) / 1000);
    await queue.stop();

    const idle = queueOn(db, 1_000);
    idle.start();
    await new Promise((resolve) => setTimeout(resolve, 1_500)); // past the first pass (schedules registered)
    statements = 0;
    await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1_000));
    const idlePerMinute = (statements / IDLE_SECONDS) * 60;
    await idle.stop();
    return { rate, idlePerMinute };
  } finally {
    await db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const lines: string[] = [];
  const say = (line: string) => {
    console.log(line);
    lines.push(line);
  };
  say(`jobs per run: ${JOBS}, concurrency per worker: ${CONCURRENCY}, no-op handler, ${os.cpus().length} cores`);
  say(`PostgreSQL, 1 worker process:  ${(await onPostgres(1)).toFixed(0)} jobs/s`);
  say(`PostgreSQL, 2 worker processes: ${(await onPostgres(2)).toFixed(0)} jobs/s`);
  const pglite = await onPglite();
  say(`embedded PGlite, 1 worker (in-process): ${pglite.rate.toFixed(0)} jobs/s`);
  say(`embedded PGlite, idle worker (poll 1000 ms): ${pglite.idlePerMinute.toFixed(0)} statements/min`);
  fs.mkdirSync(path.join(here, 'results'), { recursive: true });
  fs.writeFileSync(path.join(here, 'results', 'jobs.md'), `# bench/jobs.ts (${new Date().toISOString().slice(0, 10)})\n\n${lines.map((l) => `- ${l}`).join('\n')}\n`);
}
