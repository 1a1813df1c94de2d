// How a capability declares a background job: its type name, payload schema,
// handler, retry policy, lease and, for recurring work, its schedule. The
// capability lists its definitions in its module (`jobs: [...]`) and the
// composition root registers them with the queue.
import { Cron } from 'croner';
import type { z } from 'zod';
import { HOUR, MINUTE, SECOND } from '../core/clock.ts';
import type { RequestContext } from '../core/request-context.ts';

export interface RetryPolicy {
  /** Attempts in all, the first included (1 = never retried). */
  attempts: number;
  /** Delay before the first retry; doubles with each further one. */
  baseDelayMs: number;
  /** Upper bound of one delay. */
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 5, baseDelayMs: 10 * SECOND, maxDelayMs: HOUR };
export const DEFAULT_LEASE_MS = 5 * MINUTE;

/** What a handler is told about the run beyond its payload. */
export interface JobRun {
  id: string;
  /** 1 for the first attempt. */
  attempt: number;
  /** Aborted when the control plane stops or the claim was lost (another worker took the job over): stop soon. */
  signal: AbortSignal;
}

/** Recurring work: every `every` milliseconds (periods aligned to the epoch, so replicas agree), or on a cron expression in UTC. */
export type Recurrence = { every: number } | { cron: string };

export interface JobDefinition<P = any, S = any> {
  /** Unique name, `capability.what` (e.g. `accounts.erasure`). */
  type: string;
  payload: z.ZodType<P>;
  /** Runs under a system request context; a throw is a failed attempt (retried per `retry`). */
  handler: (rc: RequestContext, payload: P, services: S, run: JobRun) => Promise<void>;
  retry?: Partial<RetryPolicy>;
  /** How long a claim lasts without renewal; a worker that dies loses the job to another after this. */
  leaseMs?: number;
  /** Makes it recurring: the schedule enqueues one job per period, across all replicas. */
  recurring?: Recurrence & { payload?: P };
}

/** Declares the jobs of a capability whose services are S (identity at run time, like routesFor). */
export function jobsFor<S>() {
  return function defineJob<P>(definition: JobDefinition<P, S>): JobDefinition<P, S> {
    return definition;
  };
}

export function retryPolicyOf(definition: JobDefinition): RetryPolicy {
  return { ...DEFAULT_RETRY, ...definition.retry };
}

/**
 * Delay before the retry that follows failed attempt `attempt` (1-based):
 * base × 2^(attempt-1), capped, then "equal jitter" (half fixed, half random)
 * so jobs that failed together do not retry in lockstep.
 */
export function backoffDelay(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  const exponential = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(attempt - 1, 40));
  return Math.round(exponential / 2 + random() * (exponential / 2));
}

/** The stored form of a recurrence (`every:<ms>` / `cron:<expression>`); changing it re-plans the schedule. */
export function recurrenceSpec(recurrence: Recurrence): string {
  return 'every' in recurrence ? `every:${recurrence.every}` : `cron:${recurrence.cron}`;
}

/** The first occurrence strictly after `after`. */
export function nextOccurrence(recurrence: Recurrence, after: Date): Date {
  if ('every' in recurrence) {
    const every = recurrence.every;
    return new Date((Math.floor(after.getTime() / every) + 1) * every);
  }
  const next = new Cron(recurrence.cron, { timezone: 'UTC' }).nextRun(after);
  if (!next) throw new Error(`cron expression ${JSON.stringify(recurrence.cron)} has no future occurrence`);
  return next;
}

/** Throws on a definition that could never work (caught at start, not at the first run). */
export function checkDefinition(definition: JobDefinition): void {
  const where = `job ${JSON.stringify(definition.type)}`;
  if (!/^[a-z][a-z0-9_.-]{0,99}$/.test(definition.type)) throw new Error(`${where}: the type must be 1-100 lower-case letters, digits, '.', '_' or '-'`);
  const retry = retryPolicyOf(definition);
  if (!Number.isInteger(retry.attempts) || retry.attempts < 1) throw new Error(`${where}: retry.attempts must be a positive integer`);
  if (!(retry.baseDelayMs >= 0) || !(retry.maxDelayMs >= retry.baseDelayMs)) throw new Error(`${where}: retry delays must satisfy 0 <= baseDelayMs <= maxDelayMs`);
  const lease = definition.leaseMs ?? DEFAULT_LEASE_MS;
  if (!Number.isInteger(lease) || lease < 100 || lease > 2 ** 31 - 1) throw new Error(`${where}: leaseMs must be an integer from 100 to 2^31-1`);
  const recurring = definition.recurring;
  if (recurring) {
    if ('every' in recurring) {
      if (!Number.isInteger(recurring.every) || recurring.every < SECOND) throw new Error(`${where}: recurring.every must be a whole number of milliseconds, at least 1000`);
    } else {
      try {
        new Cron(recurring.cron, { timezone: 'UTC' });
      } catch (error) {
        throw new Error(`${where}: recurring.cron: ${(error as Error).message}`);
      }
    }
    const parsed = definition.payload.safeParse(recurring.payload ?? {});
    if (!parsed.success) throw new Error(`${where}: recurring.payload does not match the payload schema: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
}
