import { defineEntity, p } from '@mikro-orm/core';

/** queued (waiting for its run_at) → running (claimed under a lease) → succeeded | failed (after its last attempt); a failed attempt with attempts left goes back to queued. */
export const JOB_STATES = ['queued', 'running', 'succeeded', 'failed'] as const;
export type JobState = (typeof JOB_STATES)[number];

// One row per job. Workers claim rows with FOR UPDATE SKIP LOCKED (job-queue.ts),
// so any number of replicas share the table and each job runs once.
export const JobSchema = defineEntity({
  name: 'Job',
  tableName: 'job',
  properties: {
    id: p.uuid().primary().onCreate(() => crypto.randomUUID()),
    type: p.string().length(100),
    payload: p.json<Record<string, unknown>>(),
    state: p.enum(JOB_STATES).default('queued'),
    /** When it may run next (its scheduled time, or the end of a retry's backoff). */
    run_at: p.datetime(),
    /** Attempts started so far (a claim counts one). */
    attempts: p.integer().default(0),
    max_attempts: p.integer(),
    /** How long a claim holds before another worker may take the job over (renewed while the handler runs). */
    lease_ms: p.integer(),
    /** At most one queued or running job per (type, unique_key). */
    unique_key: p.string().length(200).nullable(),
    /** Identifies the current claim; a worker whose lease was taken over cannot settle the job. */
    claim_token: p.uuid().nullable().hidden(),
    /** The worker holding the claim (host:pid:id), for operators. */
    locked_by: p.string().length(200).nullable(),
    lease_expires_at: p.datetime().nullable(),
    /** The error of the latest failed attempt. */
    last_error: p.text().nullable(),
    created_at: p.datetime().onCreate(() => new Date()),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
    started_at: p.datetime().nullable(),
    finished_at: p.datetime().nullable(),
  },
  indexes: [
    { name: 'job_due_idx', expression: `create index "job_due_idx" on "job" ("run_at", "id") where "state" = 'queued'` },
    { name: 'job_lease_idx', expression: `create index "job_lease_idx" on "job" ("lease_expires_at") where "state" = 'running'` },
    { name: 'job_finished_idx', expression: `create index "job_finished_idx" on "job" ("finished_at") where "state" in ('succeeded', 'failed')` },
    { name: 'job_type_state_idx', properties: ['type', 'state'] },
    { name: 'job_unique_key_idx', expression: `create unique index "job_unique_key_idx" on "job" ("type", "unique_key") where "state" in ('queued', 'running')` },
  ],
});

export class Job extends JobSchema.class {}
JobSchema.setClass(Job);

// One row per recurring job type: the replica that claims a due row enqueues
// the period's job and moves next_run_at on, in one transaction.
export const JobScheduleSchema = defineEntity({
  name: 'JobSchedule',
  tableName: 'job_schedule',
  properties: {
    type: p.string().length(100).primary(),
    /** `every:<ms>` or `cron:<expression>` (UTC). */
    spec: p.string().length(200),
    next_run_at: p.datetime(),
    last_run_at: p.datetime().nullable(),
    updated_at: p.datetime().onCreate(() => new Date()).onUpdate(() => new Date()),
  },
});

export class JobSchedule extends JobScheduleSchema.class {}
JobScheduleSchema.setClass(JobSchedule);
