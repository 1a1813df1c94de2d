// Background jobs: one durable mechanism for every capability (see job-queue.ts).
export { backoffDelay, DEFAULT_LEASE_MS, DEFAULT_RETRY, jobsFor, nextOccurrence, type JobDefinition, type JobRun, type Recurrence, type RetryPolicy } from './define.ts';
export { Job, JobSchedule, JOB_STATES, type JobState } from './job.entity.ts';
export { JobQueue, type EnqueueOptions, type Enqueued, type JobQueueOptions, type JobServices, type RunSummary } from './job-queue.ts';
