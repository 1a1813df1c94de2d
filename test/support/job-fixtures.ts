// Job types for the multi-process job tests, shared by the test (which
// enqueues) and the replica processes (which run them). Each run records
// itself in job_test_execution (job id, n, pid, attempt); a job with a `gate`
// then holds until the test inserts that name into job_test_gate.
import { setTimeout as sleep } from 'node:timers/promises';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { jobsFor } from '../../control-plane/src/jobs/index.ts';
import type { AppServices } from '../../control-plane/src/server.ts';

const defineJob = jobsFor<AppServices>();

export const FIXTURE_TABLES = [
  `create table if not exists job_test_execution (id bigserial primary key, job_id uuid not null, type varchar(100) not null, n int not null, pid int not null, attempt int not null)`,
  `create table if not exists job_test_gate (name varchar(100) primary key)`,
];

async function record(em: EntityManager, jobId: string, type: string, n: number, attempt: number): Promise<void> {
  await em.execute(`insert into job_test_execution (job_id, type, n, pid, attempt) values (?, ?, ?, ?, ?)`, [jobId, type, n, process.pid, attempt]);
}

export const countedJob = defineJob({
  type: 'test.counted',
  payload: z.object({ n: z.number().int(), gate: z.string().optional() }),
  // Short, so the test sees a dead replica's job taken over within seconds.
  leaseMs: 2_000,
  retry: { attempts: 3, baseDelayMs: 100, maxDelayMs: 1_000 },
  async handler(rc, { n, gate }, _services, run) {
    await record(rc.em, run.id, 'test.counted', n, run.attempt);
    if (!gate) return;
    for (;;) {
      const open = await rc.em.execute(`select 1 from job_test_gate where name = ?`, [gate]);
      if (open.length > 0 || run.signal.aborted) return;
      await sleep(20);
    }
  },
});

export const tickJob = defineJob({
  type: 'test.tick',
  payload: z.object({}),
  recurring: { every: 1_000 },
  async handler(rc, _payload, _services, run) {
    await record(rc.em, run.id, 'test.tick', 0, run.attempt);
  },
});

export const replicaJobs = [countedJob, tickJob];
