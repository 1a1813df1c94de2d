// Two control-plane processes on one PostgreSQL database, each running the
// job loop: a job scheduled once runs once, both replicas take work, a
// recurring job runs once per period, and a replica killed mid-job loses the
// job to the other once its lease expires. Real processes and real time; the
// waits are for rows to appear, never for a fixed time.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { countedJob, FIXTURE_TABLES, replicaJobs } from '../../../test/support/job-fixtures.ts';
import { startProcess, type RunningProcess } from '../../../test/support/processes.ts';
import { detectServices } from '../../../test/support/services.ts';

const { postgresUrl } = await detectServices();
if (!postgresUrl) {
  t.pass('skipped: PostgreSQL not reachable (several processes cannot share the embedded database)');
} else {
  // One secrets key for all three: the replicas read the signing keys this one sealed.
  const SECRETS_KEY = randomBytes(32).toString('base64url');
  const cp = await startTestControlPlane(t, { extraJobs: replicaJobs, env: { SECRETS_KEY } });
  const em = () => cp.database.db.orm.em.fork();
  for (const sql of FIXTURE_TABLES) await em().execute(sql);

  async function startReplica(name: string): Promise<RunningProcess> {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), `sp-replica-${name}-`));
    t.teardown(() => fs.rm(dataDir, { recursive: true, force: true }));
    const proc = startProcess(t, process.execPath, ['test/support/jobs-replica.ts'], {
      DATABASE_URL: cp.database.url, SECRETS_KEY, REDIS_URL: '', DATA_DIR: dataDir, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1',
      NODE_ENV: 'test', LOG_LEVEL: 'error', PUBLIC_URL: '', JOBS_WORKER: 'true', JOBS_POLL_MS: '20', JOBS_CONCURRENCY: '2',
    });
    await proc.waitForLine(/^replica ready /);
    return proc;
  }

  const rows = async <T = Record<string, any>>(sql: string, params: unknown[] = []) => em().execute(sql, params) as Promise<T[]>;
  async function until<T>(what: string, check: () => Promise<T | undefined | false>): Promise<T> {
    for (let i = 0; ; i++) {
      const value = await check();
      if (value) return value;
      if (i > 3000) throw new Error(`gave up waiting for ${what}`);
      await sleep(20);
    }
  }
  const openGate = (name: string) => em().execute(`insert into job_test_gate (name) values (?)`, [name]);

  const [a, b] = await Promise.all([startReplica('a'), startReplica('b')]);
  const pids = new Set([a.pid, b.pid]);

  t.test('both replicas take work, and no job runs on both', async (t) => {
    // Each replica runs at most 2 jobs at once, so 4 held jobs are 2 on each.
    const held = [];
    for (let n = 1; n <= 4; n++) held.push((await cp.app.jobs.enqueue(countedJob, { n, gate: 'phase-1' })).id);
    const running = await until('4 held jobs to start', async () => {
      const r = await rows<{ pid: number; n: number }>(`select pid, n from job_test_execution where type = 'test.counted' and n between 1 and 4`);
      return r.length === 4 && r;
    });
    t.same(new Set(running.map((r) => r.pid)), pids, 'each replica holds jobs');
    await openGate('phase-1');

    const ids: string[] = [...held];
    const due = new Date(Date.now() + 300);
    for (let n = 100; n < 300; n++) {
      const { id } = await cp.app.jobs.enqueue(countedJob, { n }, n % 4 === 0 ? { runAt: due } : {});
      ids.push(id);
    }
    await until('every job to succeed', async () => {
      const [{ left }] = await rows<{ left: number }>(`select count(*)::int as left from job where type = 'test.counted' and state <> 'succeeded'`);
      return left === 0;
    });
    const executions = await rows<{ job_id: string; runs: number; pids: number }>(
      `select job_id, count(*)::int as runs, count(distinct pid)::int as pids from job_test_execution where type = 'test.counted' group by job_id`,
    );
    t.equal(executions.length, ids.length, `all ${ids.length} jobs ran`);
    t.same(executions.filter((e) => e.runs !== 1), [], 'each ran exactly once');
    const perPid = await rows<{ pid: number; runs: number }>(`select pid, count(*)::int as runs from job_test_execution where type = 'test.counted' group by pid`);
    t.comment(`runs per replica: ${perPid.map((p) => `${p.pid}: ${p.runs}`).join(', ')}`);
  });

  t.test('a recurring job runs once per period across both replicas', async (t) => {
    const periods = await until('3 periods of the 1-second tick', async () => {
      const r = await rows<{ run_at: Date }>(`select run_at from job where type = 'test.tick' order by run_at`);
      return r.length >= 3 && r;
    });
    const seconds = periods.map((p) => Math.floor(new Date(p.run_at).getTime() / 1000));
    t.equal(new Set(seconds).size, seconds.length, `one job per 1-second period (${seconds.length} periods)`);
    const [{ runs, jobs }] = await rows<{ runs: number; jobs: number }>(
      `select count(*)::int as runs, count(distinct job_id)::int as jobs from job_test_execution where type = 'test.tick'`,
    );
    t.equal(runs, jobs, 'and each tick job ran once');
  });

  t.test('a replica killed mid-job loses it to the other after the lease', async (t) => {
    const { id } = await cp.app.jobs.enqueue(countedJob, { n: 1000, gate: 'phase-3' });
    const [first] = await until('the job to start', async () => {
      const r = await rows<{ pid: number }>(`select pid from job_test_execution where n = 1000`);
      return r.length > 0 && r;
    });
    const victim = first!.pid === a.pid ? a : b;
    const survivor = victim === a ? b : a;
    await victim.stop('SIGKILL');
    const second = await until('the other replica to take the job over', async () => {
      const r = await rows<{ pid: number; attempt: number }>(`select pid, attempt from job_test_execution where n = 1000 order by id`);
      return r.length > 1 && r[1];
    });
    t.equal(second.pid, survivor.pid, 'the surviving replica runs it');
    t.equal(second.attempt, 2);
    await openGate('phase-3');
    const job = await until('the job to succeed', async () => {
      const [row] = await rows(`select state, attempts, last_error from job where id = ?`, [id]);
      return row?.state === 'succeeded' && row;
    });
    t.equal(job.attempts, 2);
    t.match(job.last_error, /lease expired/);
    const stopped = await survivor.stop();
    t.equal(stopped.code, 0, 'the survivor stops cleanly on SIGTERM');
  });
}
