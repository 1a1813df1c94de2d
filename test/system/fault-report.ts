// How a fault test states a scenario's report: each check asserted, the
// figures printed as TAP comments (tests write nothing into the repository;
// `npm run bench:faults` records them in bench/results/faults.md).
import type { Test } from 'tap';
import type { FaultReport } from './fault-scenarios.ts';

export function assertReport(t: Test, report: FaultReport): void {
  for (const check of report.checks) t.ok(check.ok, check.what, check.detail === undefined ? {} : { detail: check.detail });
  for (const [figure, value] of Object.entries(report.figures)) t.comment(`${figure}: ${value}`);
}

/** Private PostgreSQL and Redis servers are needed: skipped with the reason where their binaries are absent, failed under CI. */
export function privateServersSkip(missing: string | undefined): string | false {
  if (!missing) return false;
  if (process.env.CI === 'true') throw new Error(`CI must provide ${missing} for the fault tests`);
  return `needs ${missing} to run private servers`;
}
