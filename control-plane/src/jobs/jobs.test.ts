// The background-job mechanism through a real control plane (its JobQueue,
// wiring and database), on the real PostgreSQL and on the embedded PGlite.
// Time is a ManualClock the tests move; jobs run through runDue(), so nothing
// here waits for wall-clock time.
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { z } from 'zod';
import { startTestControlPlane, type TestControlPlane } from '../../../test/support/control-plane.ts';
import { detectServices } from '../../../test/support/services.ts';
import { DAY, ManualClock, MINUTE, SECOND } from '../core/clock.ts';
import { besideTransaction } from '../db/transaction-guard.ts';
import type { AppServices } from '../server.ts';
import { backoffDelay, jobsFor, JobQueue, type JobDefinition } from './index.ts';

const defineJob = jobsFor<AppServices>();

// ---- fixture job types -------------------------------------------------------

interface Call { type: string; payload: unknown; attempt: number; requestId: string; actor: unknown; at: Date }
const calls: Call[] = [];
const callsOf = (type: string, filter: (payload: any) => boolean = () => true) => calls.filter((c) => c.type === type && filter(c.payload));

const echo = defineJob({
  type: 'test.echo',
  payload: z.object({ tag: z.string() }),
  async handler(rc, payload, services, run) {
    // A system context with a working unit of work, and the composition root's services.
    const [{ one }] = await rc.em.execute<{ one: number }[]>('select 1 as one');
    if (one !== 1 || typeof services.mailer?.send !== 'function') throw new Error('handler did not get a working context and services');
    calls.push({ type: 'test.echo', payload, attempt: run.attempt, requestId: rc.requestId, actor: rc.actor, at: services.clock.now() });
  },
});

/** Fails until its attempt reaches `succeedOn` (never, when absent). */
const flaky = defineJob({
  type: 'test.flaky',
  payload: z.object({ tag: z.string(), succeedOn: z.number().int().optional() }),
  retry: { attempts: 3, baseDelayMs: 1_000, maxDelayMs: 10_000 },
  async handler(_rc, payload, services, run) {
    calls.push({ type: 'test.flaky', payload, attempt: run.attempt, requestId: '', actor: null, at: services.clock.now() });
    if (payload.succeedOn === undefined || run.attempt < payload.succeedOn) throw new Error(`attempt ${run.attempt} of ${payload.tag} failed`);
  },
});

/** Holds its first call until the test releases it (a worker that hangs or dies mid-job). */
const gates = new Map<string, { started: Promise<void>; markStarted: () => void; release: () => void; released: Promise<void> }>();
function gate(key: string) {
  let markStarted!: () => void;
  let release!: () => void;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  const g = { started, markStarted, release, released };
  gates.set(key, g);
  return g;
}
const LEASE_MS = 60_000;
const blocking = defineJob({
  type: 'test.blocking',
  payload: z.object({ key: z.string() }),
  leaseMs: LEASE_MS,
  retry: { attempts: 2, baseDelayMs: 1_000 },
  async handler(_rc, { key }, services, run) {
    calls.push({ type: 'test.blocking', payload: { key }, attempt: run.attempt, requestId: '', actor: null, at: services.clock.now() });
    const g = gates.get(key)!;
    if (callsOf('test.blocking', (p) => p.key === key).length === 1) {
      g.markStarted();
      await g.released;
    }
  },
});
const lastChance = defineJob({ ...blocking, type: 'test.blocking-once', retry: { attempts: 1 } });

const everyMinute = defineJob({
  type: 'test.every-minute',
  payload: z.object({ source: z.string() }),
  recurring: { every: MINUTE, payload: { source: 'schedule' } },
  async handler(_rc, payload, services) {
    calls.push({ type: 'test.every-minute', payload, attempt: 1, requestId: '', actor: null, at: services.clock.now() });
  },
});

const nightly = defineJob({
  type: 'test.nightly',
  payload: z.object({}),
  recurring: { cron: '0 3 * * *' },
  async handler(_rc, payload, services) {
    calls.push({ type: 'test.nightly', payload, attempt: 1, requestId: '', actor: null, at: services.clock.now() });
  },
});

const oneShotTypes = [echo, flaky, blocking, lastChance];
const recurringTypes = [everyMinute, nightly];

// 2030-01-01 02:59:30 UTC: half a minute before a minute boundary and the nightly run.
const START = Date.UTC(2030, 0, 1, 2, 59, 30);

/** A second worker on the same database (another replica, as far as the job table can tell). */
function secondWorker(cp: TestControlPlane, clock: ManualClock, definitions: JobDefinition[], options: { shutdownTimeoutMs?: number; pollMs?: number } = {}) {
  const queue = new JobQueue({
    db: cp.database.db, log: cp.app.log, clock, services: cp.app,
    pollMs: options.pollMs ?? 10, concurrency: 4, shutdownTimeoutMs: options.shutdownTimeoutMs ?? 10_000,
  });
  queue.register(definitions);
  return queue;
}

async function jobRow(cp: TestControlPlane, id: string) {
  const [row] = await cp.database.db.orm.em.fork().execute(`select * from job where id = ?`, [id]);
  return row as Record<string, any>;
}

/** Waits for a condition the test cannot be told about by an event (a row changing in another worker). */
async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; ; i++) {
    if (await check()) return;
    if (i > 6000) throw new Error(`gave up waiting for ${what}`);
    await sleep(10);
  }
}

// ---- the suite, once per database ---------------------------------------------

async function suite(t: Test, embedded: boolean) {
  calls.length = 0;
  const clock = new ManualClock(START);
  const cp = await startTestControlPlane(t, { embedded, clock, extraJobs: oneShotTypes });
  t.equal(cp.database.real, !embedded);
  const jobs = cp.app.jobs;

  t.test('enqueue → runDue runs the job once, under a system context', async (t) => {
    const { id, created } = await jobs.enqueue(echo, { tag: 'hello' });
    t.ok(created);
    t.equal((await jobs.get(id))?.state, 'queued');
    const summary = await jobs.runDue();
    t.equal(summary.succeeded, 1);
    const [call] = callsOf('test.echo', (p) => p.tag === 'hello');
    t.same(call?.payload, { tag: 'hello' });
    t.equal(call?.attempt, 1);
    t.equal(call?.requestId, `job-${id}`, 'the request id names the job');
    t.equal(call?.actor, null, 'no actor: the platform acts');
    const job = await jobs.get(id);
    t.equal(job?.state, 'succeeded');
    t.equal(job?.attempts, 1);
    t.same(job?.finished_at, clock.now());
    t.equal((await jobs.runDue()).ran, 0, 'nothing runs twice');
  });

  t.test('an invalid payload or an unregistered type is refused and stores nothing', async (t) => {
    const before = await jobs.list({ type: 'test.echo' });
    await t.rejects(jobs.enqueue(echo, { tag: 42 } as never), { name: 'ZodError' });
    const stranger = defineJob({ ...echo, type: 'test.unregistered' });
    await t.rejects(jobs.enqueue(stranger, { tag: 'x' }), /not registered/);
    await t.rejects(jobs.enqueue(echo, { tag: 'x' }, { uniqueKey: '' }), RangeError);
    t.equal((await jobs.list({ type: 'test.echo' })).length, before.length);
    t.equal((await jobs.list({ type: 'test.unregistered' })).length, 0);
  });

  t.test('a failing job is retried with exponential backoff and jitter, then failed', async (t) => {
    const { id } = await jobs.enqueue(flaky, { tag: 'always' });
    const policy = { attempts: 3, baseDelayMs: 1_000, maxDelayMs: 10_000 };

    t.equal((await jobs.runDue()).retried, 1);
    let job = await jobRow(cp, id);
    t.equal(job.state, 'queued');
    t.equal(job.attempts, 1);
    t.match(job.last_error, /attempt 1 of always failed/);
    let delay = new Date(job.run_at).getTime() - clock.now().getTime();
    t.ok(delay >= 500 && delay <= 1_000, `first retry after base/2..base (${delay} ms)`);

    const attemptsOfAlways = () => callsOf('test.flaky', (p) => p.tag === 'always').length;
    await jobs.runDue();
    t.equal(attemptsOfAlways(), 1, 'not before its backoff has passed');
    clock.advance(delay - 1);
    await jobs.runDue();
    t.equal(attemptsOfAlways(), 1, 'still not 1 ms before');
    clock.advance(1);
    t.equal((await jobs.runDue()).retried, 1, 'second attempt once due');
    job = await jobRow(cp, id);
    t.equal(job.attempts, 2);
    delay = new Date(job.run_at).getTime() - clock.now().getTime();
    t.ok(delay >= 1_000 && delay <= 2_000, `second retry after 2×base, jittered (${delay} ms)`);

    clock.advance(delay);
    t.equal((await jobs.runDue()).failed, 1, 'the last attempt fails for good');
    job = await jobRow(cp, id);
    t.equal(job.state, 'failed');
    t.equal(job.attempts, 3);
    t.match(job.last_error, /attempt 3 of always failed/);
    t.same(new Date(job.finished_at), clock.now());
    clock.advance(DAY);
    await jobs.runDue();
    t.equal(callsOf('test.flaky', (p) => p.tag === 'always').length, 3, 'a failed job is never run again');

    // The backoff doubles and is capped; jitter keeps each delay within [half, full].
    t.equal(backoffDelay(policy, 1, () => 0), 500);
    t.equal(backoffDelay(policy, 1, () => 1), 1_000);
    t.equal(backoffDelay(policy, 3, () => 1), 4_000);
    t.equal(backoffDelay(policy, 10, () => 1), 10_000);
    t.equal(backoffDelay(policy, 10, () => 0), 5_000);
  });

  t.test('a job that fails once and then works ends succeeded', async (t) => {
    const { id } = await jobs.enqueue(flaky, { tag: 'second-time', succeedOn: 2 });
    await jobs.runDue();
    clock.advance(1_000);
    await jobs.runDue();
    const job = await jobs.get(id);
    t.equal(job?.state, 'succeeded');
    t.equal(job?.attempts, 2);
  });

  t.test('a scheduled job runs only once it is due by the clock', async (t) => {
    const { id } = await jobs.enqueue(echo, { tag: 'in-30-days' }, { runAt: new Date(clock.now().getTime() + 30 * DAY) });
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'in-30-days').length, 0);
    clock.advance(30 * DAY - 1);
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'in-30-days').length, 0, 'not 1 ms early');
    clock.advance(1);
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'in-30-days').length, 1);
    t.equal((await jobs.get(id))?.state, 'succeeded');

    await jobs.enqueue(echo, { tag: 'delayed' }, { delayMs: 5 * SECOND });
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'delayed').length, 0);
    clock.advance(5 * SECOND);
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'delayed').length, 1);
  });

  t.test('a job enqueued inside a transaction exists only if the transaction commits', async (t) => {
    const em = cp.database.db.orm.em.fork();
    await t.rejects(em.transactional(async (tx) => {
      await jobs.enqueue(echo, { tag: 'rolled-back' }, { em: tx, runAt: new Date(clock.now().getTime() + 30 * DAY) });
      throw new Error('the change that caused the job failed');
    }), /the change that caused the job failed/);
    const rolledBack = await cp.database.db.orm.em.fork().execute(`select count(*)::int as n from job where payload->>'tag' = 'rolled-back'`);
    t.equal(rolledBack[0].n, 0, 'no job after a rollback');

    let idInside = '';
    await cp.database.db.orm.em.fork().transactional(async (tx) => {
      idInside = (await jobs.enqueue(echo, { tag: 'committed' }, { em: tx })).id;
      // Another connection does not see it before the commit (PGlite has one connection, so only on PostgreSQL).
      if (!embedded) {
        await besideTransaction(() => jobs.runDue());
        t.equal(callsOf('test.echo', (p) => p.tag === 'committed').length, 0, 'not claimable before the commit');
      }
    });
    t.equal((await jobs.get(idInside))?.state, 'queued', 'there after the commit');
    await jobs.runDue();
    t.equal((await jobs.get(idInside))?.state, 'succeeded');
  });

  t.test('a unique key allows one queued or running job per type and key', async (t) => {
    const first = await jobs.enqueue(echo, { tag: 'export-1' }, { uniqueKey: 'user:1', runAt: new Date(clock.now().getTime() + MINUTE) });
    const second = await jobs.enqueue(echo, { tag: 'export-2' }, { uniqueKey: 'user:1' });
    t.same(second, { id: first.id, created: false }, 'the second gets the first job');
    const otherKey = await jobs.enqueue(echo, { tag: 'export-3' }, { uniqueKey: 'user:2' });
    t.ok(otherKey.created);
    const otherType = await jobs.enqueue(flaky, { tag: 'same-key', succeedOn: 1 }, { uniqueKey: 'user:1' });
    t.ok(otherType.created, 'keys are per type');
    clock.advance(MINUTE);
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'export-2').length, 0, 'the refused one never ran');
    t.equal((await jobs.get(first.id))?.state, 'succeeded');
    const again = await jobs.enqueue(echo, { tag: 'export-4' }, { uniqueKey: 'user:1' });
    t.ok(again.created, 'the key is free once its job finished');
    t.not(again.id, first.id);
    await jobs.runDue();
  });

  t.test('cancel withdraws the queued job of a unique key, frees the key, and leaves others alone', async (t) => {
    const later = new Date(clock.now().getTime() + DAY);
    const scheduled = await jobs.enqueue(echo, { tag: 'canceled' }, { uniqueKey: 'erase:1', runAt: later });
    const other = await jobs.enqueue(echo, { tag: 'kept' }, { uniqueKey: 'erase:2', runAt: later });
    const sameKeyOtherType = await jobs.enqueue(flaky, { tag: 'kept-too', succeedOn: 1 }, { uniqueKey: 'erase:1', runAt: later });

    // Inside a transaction that rolls back, nothing is withdrawn.
    await t.rejects(cp.database.db.orm.em.fork().transactional(async (tx) => {
      t.equal(await jobs.cancel(echo, 'erase:1', { em: tx }), 1);
      throw new Error('rolled back');
    }), /rolled back/);
    t.equal((await jobs.get(scheduled.id))?.state, 'queued', 'still there after the rollback');

    t.equal(await jobs.cancel(echo, 'erase:1'), 1);
    t.equal(await jobs.get(scheduled.id), null, 'withdrawn');
    t.equal(await jobs.cancel(echo, 'erase:1'), 0, 'nothing left to withdraw');
    const again = await jobs.enqueue(echo, { tag: 'rescheduled' }, { uniqueKey: 'erase:1', runAt: later });
    t.ok(again.created, 'the key is free again');
    clock.advance(DAY);
    await jobs.runDue();
    t.equal(callsOf('test.echo', (p) => p.tag === 'canceled').length, 0, 'the withdrawn job never ran');
    t.equal(callsOf('test.echo', (p) => p.tag === 'rescheduled').length, 1);
    t.equal((await jobs.get(other.id))?.state, 'succeeded', 'another key is untouched');
    t.equal((await jobs.get(sameKeyOtherType.id))?.state, 'succeeded', 'another type with the key is untouched');
    t.equal(await jobs.cancel(echo, 'erase:2'), 0, 'a finished job is not withdrawn');
    t.equal((await jobs.get(other.id))?.state, 'succeeded');
  });

  t.test('a job whose worker stopped answering is taken over after its lease', async (t) => {
    const other = secondWorker(cp, clock, oneShotTypes);
    const g = gate('lease-1');
    const { id } = await jobs.enqueue(blocking, { key: 'lease-1' });
    const firstWorker = jobs.runDue();
    await g.started;
    let job = await jobRow(cp, id);
    t.equal(job.state, 'running');
    t.equal(job.locked_by, jobs.workerId);
    t.same(new Date(job.lease_expires_at), new Date(clock.now().getTime() + LEASE_MS));

    const attempts = () => callsOf('test.blocking', (p) => p.key === 'lease-1').map((c) => c.attempt);
    await other.runDue();
    t.same(attempts(), [1], 'the lease holds it from the other worker');
    clock.advance(LEASE_MS - 1);
    await other.runDue();
    t.same(attempts(), [1], 'until it expires');
    clock.advance(1);
    await other.runDue();
    t.same(attempts(), [1, 2], 'then the other worker runs it');
    job = await jobRow(cp, id);
    t.equal(job.state, 'succeeded');
    t.equal(job.attempts, 2, 'the lost attempt counts');
    t.match(job.last_error, /lease expired/);

    // The first worker finally returns: it no longer holds the claim, so it changes nothing.
    const finishedAt = job.finished_at;
    g.release();
    const late = await firstWorker;
    // Its run of the blocking job ends as lost (no outcome recorded); product jobs due meanwhile (the
    // every-minute billing clock) may have run and succeeded in the same runDue, so count the lost one only.
    t.equal(late.ran - late.succeeded - late.retried - late.failed, 1, 'the stale worker does not record an outcome');
    job = await jobRow(cp, id);
    t.equal(job.state, 'succeeded');
    t.same(job.finished_at, finishedAt);
  });

  t.test('a lease that expires on the last attempt fails the job', async (t) => {
    const other = secondWorker(cp, clock, oneShotTypes);
    const g = gate('lease-2');
    const { id } = await jobs.enqueue(lastChance, { key: 'lease-2' });
    const firstWorker = jobs.runDue();
    await g.started;
    clock.advance(LEASE_MS);
    await other.runDue();
    t.equal(callsOf('test.blocking', (p) => p.key === 'lease-2').length, 1, 'reaped, not run again');
    const job = await jobRow(cp, id);
    t.equal(job.state, 'failed');
    t.equal(job.attempts, 1);
    t.match(job.last_error, /lease expired/);
    g.release();
    await firstWorker;
    t.equal((await jobRow(cp, id)).state, 'failed');
  });

  t.test('the background loop runs due jobs by itself and stop() lets a running job finish', async (t) => {
    const worker = secondWorker(cp, clock, oneShotTypes);
    worker.start();
    const g = gate('loop-1');
    const { id } = await jobs.enqueue(blocking, { key: 'loop-1' });
    await g.started;
    const stopped = worker.stop();
    g.release();
    await stopped;
    const job = await jobs.get(id);
    t.equal(job?.state, 'succeeded', 'finished before stop() returned');
  });

  t.test('stop() hands a job that does not finish in time back to the queue', async (t) => {
    const worker = secondWorker(cp, clock, oneShotTypes, { shutdownTimeoutMs: 0 });
    worker.start();
    const g = gate('loop-2');
    const { id } = await jobs.enqueue(blocking, { key: 'loop-2' });
    await g.started;
    await worker.stop();
    let job = await jobRow(cp, id);
    t.equal(job.state, 'queued', 'back in the queue at once, not after its lease');
    t.equal(job.attempts, 0, 'the interrupted attempt does not count');
    t.equal(job.claim_token, null);
    g.release();
    await jobs.runDue();
    t.equal(callsOf('test.blocking', (p) => p.key === 'loop-2').length, 2, 'another worker runs it now');
    job = await jobRow(cp, id);
    t.equal(job.state, 'succeeded');
    t.equal(job.attempts, 1);
  });

  t.test('the background loop picks up work enqueued by another replica', async (t) => {
    const worker = secondWorker(cp, clock, oneShotTypes);
    worker.start();
    t.teardown(() => worker.stop());
    const { id } = await jobs.enqueue(echo, { tag: 'from-elsewhere' }, { runAt: clock.now() });
    await until('the loop to run the job', async () => (await jobs.get(id))?.state === 'succeeded');
    t.equal(callsOf('test.echo', (p) => p.tag === 'from-elsewhere').length, 1);
  });

  t.test('finished jobs are pruned: succeeded after a week, failed after 30 days', async (t) => {
    const kept = await jobs.enqueue(echo, { tag: 'retention-succeeded' });
    const failed = await jobs.enqueue(echo, { tag: 'retention-failed' });
    const pending = await jobs.enqueue(echo, { tag: 'retention-pending' }, { runAt: new Date(clock.now().getTime() + 60 * DAY) });
    await jobs.runDue();
    // Stands for a job that failed its last attempt now.
    await cp.database.db.orm.em.fork().execute(`update job set state = 'failed' where id = ?`, [failed.id]);
    clock.advance(7 * DAY - MINUTE);
    await jobs.runDue();
    t.ok(await jobs.get(kept.id), 'a succeeded job is kept for a week');
    clock.advance(2 * MINUTE + 2 * 3_600_000);
    await jobs.runDue();
    t.equal(await jobs.get(kept.id), null, 'then deleted');
    t.ok(await jobs.get(failed.id), 'a failed job is kept longer');
    clock.advance(23 * DAY);
    await jobs.runDue();
    t.equal(await jobs.get(failed.id), null, 'and deleted after 30 days');
    t.equal((await jobs.get(pending.id))?.state, 'queued', 'a job that has not run is never pruned');
    const prunes = await jobs.list({ type: 'jobs.prune' });
    t.ok(prunes.length > 0 && prunes.every((j) => j.state === 'succeeded'), 'the pruning job itself ran');
  });
}

async function recurringSuite(t: Test, embedded: boolean) {
  const clock = new ManualClock(START);
  const cp = await startTestControlPlane(t, { embedded, clock, extraJobs: recurringTypes });
  const jobs = cp.app.jobs;
  const other = secondWorker(cp, clock, recurringTypes);
  calls.length = 0;
  const count = () => callsOf('test.every-minute').length;

  t.equal((await jobs.runDue()).ran, 0, 'nothing before the first occurrence');
  clock.advance(30 * SECOND); // 03:00:00
  // Both replicas look at the same moment: the period's job is enqueued once and run once.
  const [a, b] = await Promise.all([jobs.runDue(), other.runDue()]);
  t.equal(count(), 1, 'one run for the period across two workers');
  t.equal(a.ran + b.ran >= 2, true, 'the minute job and the nightly job ran');
  t.same(callsOf('test.every-minute').at(-1)?.payload, { source: 'schedule' }, 'with the declared payload');
  t.equal(callsOf('test.nightly').length, 1, 'the cron job ran at 03:00 UTC');
  await Promise.all([jobs.runDue(), other.runDue()]);
  t.equal(count(), 1, 'not again within the period');

  clock.advance(59 * SECOND);
  await jobs.runDue();
  t.equal(count(), 1, 'not before the next boundary');
  clock.advance(1 * SECOND);
  await Promise.all([other.runDue(), jobs.runDue()]);
  t.equal(count(), 2, 'once in the next period');

  clock.advance(10 * MINUTE);
  await Promise.all([jobs.runDue(), other.runDue()]);
  t.equal(count(), 3, 'missed periods are not replayed one by one');
  const schedule = (await cp.database.db.orm.em.fork().execute(`select * from job_schedule where type = 'test.every-minute'`))[0];
  t.same(new Date(schedule.next_run_at), new Date(Date.UTC(2030, 0, 1, 3, 12, 0)), 'the next run is the next boundary');

  clock.set(Date.UTC(2030, 0, 2, 2, 59, 59));
  await jobs.runDue();
  t.equal(callsOf('test.nightly').length, 1, 'the nightly job waits for 03:00');
  clock.advance(1 * SECOND);
  await jobs.runDue();
  t.equal(callsOf('test.nightly').length, 2, 'and runs once the next night');
  t.ok(callsOf('test.nightly').every((c) => c.at.getUTCHours() === 3 && c.at.getUTCMinutes() === 0));
}

const { postgresUrl } = await detectServices();
t.test('on PostgreSQL', { skip: !postgresUrl && 'PostgreSQL not reachable' }, (t) => suite(t, false));
t.test('on embedded PGlite', (t) => suite(t, true));
t.test('recurring jobs on PostgreSQL', { skip: !postgresUrl && 'PostgreSQL not reachable' }, (t) => recurringSuite(t, false));
t.test('recurring jobs on embedded PGlite', (t) => recurringSuite(t, true));
