// Prometheus metrics of the job queue on this replica: attempts by job type
// and outcome, how long attempts take, and when each type last succeeded here.
// Every registered type starts at zero, so an alert on a type that has never
// failed (or never run on this replica) has a series to read.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export const JOB_OUTCOMES = ['succeeded', 'retried', 'failed', 'lost'] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];

const SECONDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

export class JobMetrics {
  readonly #attempts = new Counter({
    name: 'jobs_attempts_total',
    help: 'Job attempts this replica ran, by job type and outcome (succeeded; retried: failed, tried again later; failed: for good; lost: the claim went to another worker)',
    labelNames: ['type', 'outcome'] as const, registers: [],
  });
  readonly #duration = new Histogram({ name: 'jobs_attempt_duration_seconds', help: 'How long a job attempt ran on this replica, by job type', labelNames: ['type'] as const, buckets: SECONDS, registers: [] });
  readonly #lastSuccess = new Gauge({ name: 'jobs_last_success_timestamp_seconds', help: 'Unix time of the last attempt of the job type that succeeded on this replica (0: none yet)', labelNames: ['type'] as const, registers: [] });

  /** Starts the series of a job type at zero. */
  declare(type: string): void {
    for (const outcome of JOB_OUTCOMES) this.#attempts.inc({ type, outcome }, 0);
    this.#duration.zero({ type });
    this.#lastSuccess.set({ type }, 0);
  }

  attempt(type: string, outcome: JobOutcome, seconds: number): void {
    this.#attempts.inc({ type, outcome });
    this.#duration.observe({ type }, seconds);
    if (outcome === 'succeeded') this.#lastSuccess.set({ type }, Date.now() / 1000);
  }

  /** A job whose worker died on its last attempt, failed by the replica that found its lease expired. */
  failedByLease(type: string): void {
    this.#attempts.inc({ type, outcome: 'failed' });
  }

  register(registry: Registry): void {
    for (const metric of [this.#attempts, this.#duration, this.#lastSuccess]) registry.registerMetric(metric);
  }
}
