// The one background-job mechanism of the control plane: durable jobs in the
// `job` table, claimed with FOR UPDATE SKIP LOCKED (so any number of replicas
// share the table and each job runs once), retried with exponential backoff
// and jitter, scheduled (run_at) and recurring (job_schedule), with a lease
// that another worker takes over when the holder dies.
//
// Everything goes through the ORM's own connection pool, so on the embedded
// PGlite (one connection) jobs share the single session with the requests,
// and a job enqueued with a request's entity manager joins its transaction.
// Time comes from the Clock (core/clock.ts), never from the database's now(),
// so tests move a ManualClock and call runDue() instead of waiting.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Clock } from '../core/clock.ts';
import { systemContext } from '../core/request-context.ts';
import type { Database } from '../db/orm.ts';
import {
  backoffDelay, checkDefinition, DEFAULT_LEASE_MS, nextOccurrence, recurrenceSpec, retryPolicyOf,
  type JobDefinition, type Recurrence,
} from './define.ts';
import { Job, type JobState } from './job.entity.ts';
import { JobMetrics } from './job-metrics.ts';

export interface JobQueueOptions {
  db: Database;
  log: Logger;
  clock: Clock;
  /** Handed to every handler (the composition root's services; filled in as capabilities start). */
  services: { db: Database; log: Logger };
  /** Idle wait between polls of the background loop. */
  pollMs: number;
  /** Jobs one worker runs at once. */
  concurrency: number;
  /** How long stop() lets running jobs finish before it hands them back to the queue. */
  shutdownTimeoutMs: number;
}

export interface EnqueueOptions {
  /** Not before this time (default: now). */
  runAt?: Date;
  /** Not before this many milliseconds from now (alternative to runAt). */
  delayMs?: number;
  /** At most one queued or running job of this type per key; a second enqueue returns the first's id with created false. */
  uniqueKey?: string;
  /** Enqueue through this entity manager: inside its transaction, the job exists only if that transaction commits. */
  em?: EntityManager;
}

export interface Enqueued {
  id: string;
  /** False when a job with the same unique key was already queued or running (its id is returned). */
  created: boolean;
}

export interface RunSummary {
  /** Attempts run. */
  ran: number;
  succeeded: number;
  /** Failed attempts put back for a retry. */
  retried: number;
  /** Jobs that failed for good. */
  failed: number;
}

/** The services a capability that enqueues jobs needs (merged into AppServices). */
export interface JobServices {
  jobs: JobQueue;
}

interface ClaimRow {
  kind: 'claimed' | 'reaped';
  id: string;
  type: string;
  payload: unknown;
  attempts: number;
  max_attempts: number | null;
  claim_token: string | null;
  state: JobState | null;
}

type Outcome = 'succeeded' | 'retried' | 'failed' | 'lost';

const MAX_ERROR_LENGTH = 4000;

/** The built-in housekeeping job: finished jobs are kept a while for operators, then deleted. */
const PRUNE_TYPE = 'jobs.prune';
const KEEP_SUCCEEDED_MS = 7 * 24 * 3600_000;
const KEEP_FAILED_MS = 30 * 24 * 3600_000;

export class JobQueue {
  readonly workerId = `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  /** Attempts by type and outcome on this replica (registered on /metrics by the composition root). */
  readonly metrics = new JobMetrics();
  readonly #options: JobQueueOptions;
  readonly #definitions = new Map<string, JobDefinition>();
  readonly #active = new Map<string, { done: Promise<Outcome>; token: string; abort: AbortController }>();
  #schedulesSynced: Promise<void> | undefined;
  /** Earliest next_run_at of any schedule as last seen; no schedule query before it. */
  #nextScheduleCheck = 0;
  #loop: Promise<void> | undefined;
  #stopping = false;
  #wake: (() => void) | undefined;

  constructor(options: JobQueueOptions) {
    this.#options = options;
    this.register([{
      type: PRUNE_TYPE,
      payload: z.object({}),
      recurring: { every: 3600_000 },
      retry: { attempts: 3 },
      handler: async (rc) => {
        const now = this.#options.clock.now().getTime();
        await rc.em.execute(
          `delete from job where (state = 'succeeded' and finished_at < ?) or (state = 'failed' and finished_at < ?)`,
          [new Date(now - KEEP_SUCCEEDED_MS), new Date(now - KEEP_FAILED_MS)],
        );
      },
    }]);
  }

  /** Adds job types (at start, before start() or the first runDue()). */
  register(definitions: readonly JobDefinition[]): void {
    for (const definition of definitions) {
      checkDefinition(definition);
      if (this.#definitions.has(definition.type)) throw new Error(`job type ${JSON.stringify(definition.type)} is registered twice`);
      this.#definitions.set(definition.type, definition);
      this.metrics.declare(definition.type);
    }
    this.#schedulesSynced = undefined;
  }

  /** Stores a job; it runs once it is due, on whichever replica claims it first. */
  async enqueue<P>(job: JobDefinition<P, any>, payload: P, options: EnqueueOptions = {}): Promise<Enqueued> {
    const definition = this.#definitions.get(job.type);
    if (definition !== job) throw new Error(`job type ${JSON.stringify(job.type)} is not registered with this queue (list it in its capability's jobs)`);
    const parsed = job.payload.parse(payload);
    const now = this.#options.clock.now();
    const runAt = options.runAt ?? new Date(now.getTime() + (options.delayMs ?? 0));
    if (Number.isNaN(runAt.getTime())) throw new RangeError('enqueue: runAt is not a valid date');
    if (options.uniqueKey !== undefined && (options.uniqueKey.length === 0 || options.uniqueKey.length > 200)) {
      throw new RangeError('enqueue: uniqueKey must be 1-200 characters');
    }
    const em = options.em ?? this.#options.db.orm.em.fork();
    const row = {
      type: job.type,
      payload: JSON.stringify(parsed ?? {}),
      runAt,
      maxAttempts: retryPolicyOf(definition).attempts,
      leaseMs: definition.leaseMs ?? DEFAULT_LEASE_MS,
      uniqueKey: options.uniqueKey ?? null,
      now,
    };
    const enqueued = await insertJob(em, row);
    if (enqueued.created && !options.em && runAt.getTime() <= now.getTime()) this.#wake?.();
    return enqueued;
  }

  /**
   * Withdraws the queued job of this type and unique key (a scheduled erasure
   * whose deletion was canceled), so the key is free for a later enqueue.
   * A job already running is left to finish: its handler must check that its
   * work is still wanted. With `em`, joins that transaction. Returns how many
   * jobs were withdrawn (0 or 1).
   */
  async cancel(job: JobDefinition<any, any>, uniqueKey: string, options: { em?: EntityManager } = {}): Promise<number> {
    const em = options.em ?? this.#options.db.orm.em.fork();
    return affected(em, `delete from job where type = ? and unique_key = ? and state = 'queued'`, [job.type, uniqueKey]);
  }

  /** One job by id (null when unknown or pruned). */
  async get(id: string): Promise<Job | null> {
    return this.#options.db.orm.em.fork().findOne(Job, { id });
  }

  /** Jobs by type and/or state, oldest first. */
  async list(filter: { type?: string; state?: JobState; limit?: number } = {}): Promise<Job[]> {
    const where: Record<string, unknown> = {};
    if (filter.type) where.type = filter.type;
    if (filter.state) where.state = filter.state;
    return this.#options.db.orm.em.fork().find(Job, where, { orderBy: { created_at: 'asc', id: 'asc' }, limit: filter.limit ?? 1000 });
  }

  /** Number of jobs per type and state (for operators). */
  async counts(): Promise<{ type: string; state: JobState; count: number }[]> {
    return this.#options.db.orm.em.fork().execute(`select type, state, count(*)::int as count from job group by type, state order by type, state`);
  }

  /**
   * Runs, in this process and to the end, every job that is due by the clock
   * (and what a due schedule enqueues), then returns. Jobs retried with a
   * backoff wait for the clock to reach them. For tests and tools; the
   * background loop does the same continuously.
   */
  async runDue(): Promise<RunSummary> {
    const summary: RunSummary = { ran: 0, succeeded: 0, retried: 0, failed: 0 };
    await this.#syncSchedules();
    for (;;) {
      await this.#fireSchedules(true);
      const { claimed, reaped } = await this.#claim(this.#options.concurrency);
      if (claimed.length === 0 && reaped === 0) return summary;
      const outcomes = await Promise.all(claimed.map((row) => this.#start(row).done));
      for (const outcome of outcomes) {
        summary.ran += 1;
        if (outcome !== 'lost') summary[outcome] += 1;
      }
    }
  }

  /** Starts the background loop (poll, claim, run up to `concurrency` jobs at once). */
  start(): void {
    if (this.#loop) return;
    this.#stopping = false;
    this.#loop = this.#pollLoop();
  }

  /**
   * Stops claiming, lets running jobs finish for up to shutdownTimeoutMs, then
   * aborts the rest and hands them back to the queue (their attempt not
   * counted) so another replica runs them now rather than after their lease.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wake?.();
    await this.#loop;
    this.#loop = undefined;
    if (this.#active.size === 0) return;
    const all = Promise.allSettled([...this.#active.values()].map((a) => a.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), this.#options.shutdownTimeoutMs))),
    ]);
    clearTimeout(timer);
    if (!timedOut) return;
    const em = this.#options.db.orm.em.fork();
    for (const [id, active] of this.#active) {
      active.abort.abort(new Error('the control plane is stopping'));
      try {
        await em.execute(
          `update job set state = 'queued', attempts = greatest(attempts - 1, 0), run_at = ?, claim_token = null, locked_by = null, lease_expires_at = null, updated_at = ?
           where id = ? and claim_token = ? and state = 'running'`,
          [this.#options.clock.now(), new Date(), id, active.token],
        );
        this.#options.log.warn({ job_id: id }, 'job still running at shutdown: handed back to the queue');
      } catch (error) {
        this.#options.log.error({ err: error, job_id: id }, 'could not hand a running job back at shutdown (another worker takes it over when its lease expires)');
      }
    }
  }

  // ---- the loop ---------------------------------------------------------------

  async #pollLoop(): Promise<void> {
    const { log, pollMs, concurrency } = this.#options;
    while (!this.#stopping) {
      let full = false;
      try {
        await this.#syncSchedules();
        await this.#fireSchedules(false);
        const free = concurrency - this.#active.size;
        if (free > 0) {
          const { claimed, reaped } = await this.#claim(free);
          for (const row of claimed) this.#start(row);
          // A full batch or a reaped job: more may be waiting, so look again as soon as there is room.
          full = claimed.length === free || reaped > 0;
        } else {
          full = true;
        }
      } catch (error) {
        log.error({ err: error }, 'job poll failed; retrying after the poll interval');
      }
      if (this.#stopping) break;
      if (full && this.#active.size < concurrency) continue;
      await new Promise<void>((resolve) => {
        // Woken early by a freed slot (when full), a local enqueue of due work, or stop().
        const timer = full ? undefined : setTimeout(done, pollMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.#wake = done;
      });
      this.#wake = undefined;
    }
  }

  // ---- schedules --------------------------------------------------------------

  #syncSchedules(): Promise<void> {
    this.#schedulesSynced ??= (async () => {
      const em = this.#options.db.orm.em.fork();
      const now = this.#options.clock.now();
      for (const definition of this.#definitions.values()) {
        if (!definition.recurring) continue;
        const spec = recurrenceSpec(definition.recurring);
        // A new schedule, or one whose recurrence changed, starts at its next occurrence.
        await em.execute(
          `insert into job_schedule (type, spec, next_run_at, updated_at) values (?, ?, ?, ?)
           on conflict (type) do update set spec = excluded.spec, next_run_at = excluded.next_run_at, updated_at = excluded.updated_at
           where job_schedule.spec <> excluded.spec`,
          [definition.type, spec, nextOccurrence(definition.recurring, now), new Date()],
        );
      }
      this.#nextScheduleCheck = 0;
    })().catch((error) => {
      this.#schedulesSynced = undefined;
      throw error;
    });
    return this.#schedulesSynced;
  }

  /**
   * Enqueues the job of every due schedule of the types this worker knows and
   * moves each to its next occurrence after now, in one transaction per pass:
   * the row lock (SKIP LOCKED for the others) makes it once per period across
   * replicas, and periods missed while nothing ran are not replayed one by one.
   */
  async #fireSchedules(always: boolean): Promise<void> {
    const now = this.#options.clock.now();
    if (!always && now.getTime() < this.#nextScheduleCheck) return;
    const recurring = [...this.#definitions.values()].filter((d) => d.recurring);
    if (recurring.length === 0) {
      this.#nextScheduleCheck = Number.POSITIVE_INFINITY;
      return;
    }
    const next = await this.#options.db.orm.em.fork().transactional(async (em) => {
      const due = await em.execute<{ type: string; next_run_at: Date | string }[]>(
        `select type, next_run_at from job_schedule where next_run_at <= ? and type = any(string_to_array(?, ',')) for update skip locked`,
        [now, recurring.map((d) => d.type).join(',')],
      );
      for (const row of due) {
        const definition = this.#definitions.get(row.type)!;
        const recurrence = definition.recurring as Recurrence & { payload?: unknown };
        // Unique per type: a run still queued or running absorbs the next period instead of piling up.
        await insertJob(em, {
          type: definition.type,
          payload: JSON.stringify(definition.payload.parse(recurrence.payload ?? {}) ?? {}),
          runAt: now,
          maxAttempts: retryPolicyOf(definition).attempts,
          leaseMs: definition.leaseMs ?? DEFAULT_LEASE_MS,
          uniqueKey: 'recurring',
          now,
        });
        await em.execute(
          `update job_schedule set next_run_at = ?, last_run_at = ?, updated_at = ? where type = ?`,
          [nextOccurrence(recurrence, now), new Date(row.next_run_at), new Date(), row.type],
        );
      }
      const [earliest] = await em.execute<{ at: Date | string | null }[]>(
        `select min(next_run_at) as at from job_schedule where type = any(string_to_array(?, ','))`,
        [recurring.map((d) => d.type).join(',')],
      );
      return earliest?.at ? new Date(earliest.at).getTime() : Number.POSITIVE_INFINITY;
    });
    this.#nextScheduleCheck = next;
  }

  // ---- claiming and running ---------------------------------------------------

  /**
   * One statement: hands jobs whose lease expired back to the queue (or fails
   * them when that was their last attempt), and claims up to `limit` due jobs
   * of the known types, oldest run_at first, skipping rows another worker has
   * locked. Reaped jobs are claimable from the next call on.
   */
  async #claim(limit: number): Promise<{ claimed: ClaimRow[]; reaped: number }> {
    const now = this.#options.clock.now();
    const types = [...this.#definitions.keys()].join(',');
    const rows = await this.#options.db.orm.em.fork().execute<ClaimRow[]>(
      `with reaped as (
         update job set
           state = case when attempts >= max_attempts then 'failed' else 'queued' end,
           finished_at = case when attempts >= max_attempts then ?::timestamptz end,
           run_at = ?, last_error = ?, claim_token = null, locked_by = null, lease_expires_at = null, updated_at = ?
         where id in (select id from job where state = 'running' and lease_expires_at <= ? for update skip locked)
         returning id, type, state, attempts
       ), next as (
         select id from job
         where state = 'queued' and run_at <= ? and type = any(string_to_array(?, ','))
         order by run_at, id
         limit ?
         for update skip locked
       ), claimed as (
         update job j set
           state = 'running', attempts = j.attempts + 1, claim_token = gen_random_uuid(), locked_by = ?,
           lease_expires_at = ?::timestamptz + j.lease_ms * interval '1 millisecond', started_at = ?, updated_at = ?
         from next where j.id = next.id
         returning j.id, j.type, j.payload, j.attempts, j.max_attempts, j.claim_token
       )
       select 'claimed' as kind, id, type, payload, attempts, max_attempts, claim_token, null as state from claimed
       union all
       select 'reaped', id, type, null, attempts, null, null, state from reaped`,
      [now, now, 'lease expired: the worker running it stopped without finishing', new Date(), now, now, types, limit, this.workerId, now, now, new Date()],
    );
    const claimed: ClaimRow[] = [];
    let reaped = 0;
    for (const row of rows) {
      if (row.kind === 'claimed') {
        claimed.push(row);
        continue;
      }
      reaped += 1;
      const log = this.#options.log.child({ job_id: row.id, job_type: row.type, attempt: row.attempts });
      if (row.state === 'failed') {
        log.error('job failed: its lease expired on its last attempt');
        if (this.#definitions.has(row.type)) this.metrics.failedByLease(row.type);
      }
      else log.warn('job lease expired: back in the queue for another worker');
    }
    return { claimed, reaped };
  }

  #start(row: ClaimRow): { done: Promise<Outcome> } {
    const abort = new AbortController();
    const started = performance.now();
    const done = this.#run(row, abort).then((outcome) => {
      if (this.#definitions.has(row.type)) this.metrics.attempt(row.type, outcome, (performance.now() - started) / 1000);
      return outcome;
    }).finally(() => {
      this.#active.delete(row.id);
      this.#wake?.();
    });
    this.#active.set(row.id, { done, token: row.claim_token!, abort });
    return { done };
  }

  async #run(row: ClaimRow, abort: AbortController): Promise<Outcome> {
    const { clock, db, services } = this.#options;
    const definition = this.#definitions.get(row.type)!;
    const token = row.claim_token!;
    const leaseMs = definition.leaseMs ?? DEFAULT_LEASE_MS;
    const rc = systemContext(services, { requestId: `job-${row.id}` });
    const log = this.#options.log.child({ job_id: row.id, job_type: row.type, attempt: row.attempts });

    // Renew the lease while the handler runs; a renewal that finds the claim gone means another worker took over.
    const renewal = setInterval(() => {
      void affected(
        db.orm.em.fork(),
        `update job set lease_expires_at = ?, updated_at = ? where id = ? and claim_token = ? and state = 'running'`,
        [new Date(clock.now().getTime() + leaseMs), new Date(), row.id, token],
      ).then((changed) => {
        if (changed === 0) abort.abort(new Error('the job was taken over by another worker (lease lost)'));
      }, (error: unknown) => log.warn({ err: error }, 'could not renew a job lease'));
    }, Math.max(50, Math.floor(leaseMs / 3)));
    renewal.unref();

    let error: unknown;
    let permanent = false;
    try {
      const parsed = definition.payload.safeParse(row.payload);
      if (!parsed.success) {
        permanent = true;
        throw new Error(`payload does not match the job type's schema: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
      }
      await definition.handler(rc, parsed.data, services, { id: row.id, attempt: row.attempts, signal: abort.signal });
    } catch (caught) {
      error = caught;
    } finally {
      clearInterval(renewal);
    }

    const now = clock.now();
    const em = db.orm.em.fork();
    try {
      if (error === undefined) {
        const settled = await affected(
          em,
          `update job set state = 'succeeded', finished_at = ?, claim_token = null, locked_by = null, lease_expires_at = null, updated_at = ?
           where id = ? and claim_token = ? and state = 'running'`,
          [now, new Date(), row.id, token],
        );
        if (settled === 0) return lost(log);
        log.debug('job succeeded');
        return 'succeeded';
      }
      const message = describeError(error);
      const attemptsLeft = !permanent && row.attempts < (row.max_attempts ?? 1);
      const runAt = attemptsLeft ? new Date(now.getTime() + backoffDelay(retryPolicyOf(definition), row.attempts)) : now;
      const settled = await affected(
        em,
        `update job set state = ?, run_at = ?, finished_at = ?, last_error = ?, claim_token = null, locked_by = null, lease_expires_at = null, updated_at = ?
         where id = ? and claim_token = ? and state = 'running'`,
        [attemptsLeft ? 'queued' : 'failed', runAt, attemptsLeft ? null : now, message, new Date(), row.id, token],
      );
      if (settled === 0) return lost(log);
      if (attemptsLeft) {
        log.warn({ err: error, retry_at: runAt.toISOString() }, 'job attempt failed; retrying later');
        return 'retried';
      }
      log.error({ err: error }, permanent ? 'job failed: its payload is invalid' : 'job failed on its last attempt');
      return 'failed';
    } catch (settleError) {
      // The database went away (or is closing): the lease decides what happens to the job.
      log.error({ err: settleError, job_error: error === undefined ? undefined : describeError(error) }, 'could not record the outcome of a job');
      return 'lost';
    }
  }
}

/** Runs an UPDATE/DELETE and returns how many rows it changed. */
async function affected(em: EntityManager, sql: string, params: unknown[]): Promise<number> {
  const result = await em.execute(sql, params, 'run') as unknown as { affectedRows?: number };
  return result.affectedRows ?? 0;
}

function lost(log: Logger): Outcome {
  log.warn('job finished after another worker had taken it over (its lease expired); outcome not recorded');
  return 'lost';
}

function describeError(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

async function insertJob(em: EntityManager, row: {
  type: string; payload: string; runAt: Date; maxAttempts: number; leaseMs: number; uniqueKey: string | null; now: Date;
}): Promise<Enqueued> {
  for (let tries = 0; ; tries++) {
    const id = randomUUID();
    const inserted = await em.execute<{ id: string }[]>(
      `insert into job (id, type, payload, state, run_at, attempts, max_attempts, lease_ms, unique_key, created_at, updated_at)
       values (?, ?, ?::jsonb, 'queued', ?, 0, ?, ?, ?, ?, ?)
       on conflict (type, unique_key) where state in ('queued', 'running') do nothing
       returning id`,
      [id, row.type, row.payload, row.runAt, row.maxAttempts, row.leaseMs, row.uniqueKey, row.now, row.now],
    );
    if (inserted.length > 0) return { id, created: true };
    const [existing] = await em.execute<{ id: string }[]>(
      `select id from job where type = ? and unique_key = ? and state in ('queued', 'running')`,
      [row.type, row.uniqueKey],
    );
    if (existing) return { id: existing.id, created: false };
    // The holder of the key finished between the two statements: try again.
    if (tries >= 3) throw new Error(`could not enqueue ${row.type}: unique key ${row.uniqueKey} keeps changing hands`);
  }
}
