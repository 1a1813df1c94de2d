// Small measuring helpers shared by the control-channel benchmark's processes:
// percentiles of a sample, a process's CPU time and memory from /proc (Linux).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

/** The p-th percentile (nearest rank) of an ascending sample. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export interface Summary { n: number; p50: number; p99: number; max: number; mean: number }

export function summarize(samples: readonly number[]): Summary {
  const s = [...samples].sort((a, b) => a - b);
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? NaN, mean: s.reduce((a, b) => a + b, 0) / (s.length || 1) };
}

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim()) || 100;

/** CPU time (ms) a process has used so far: its threads' run time from /proc/<pid>/task/<tid>/schedstat (ns), else user + system from /proc/<pid>/stat. */
export function cpuMsOf(pid: number): number {
  // The scheduler's run time of every thread, in nanoseconds (/proc/<pid>/task/<tid>/schedstat, first field):
  // utime + stime count clock ticks (10 ms here), which quantised a 20-round block of 5 ms rounds to ±0.5 ms a
  // round. Threads that have exited are not counted (Node's threads live as long as the process).
  try {
    let ns = 0;
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // The thread ended between the listing and the read.
      }
    }
    return ns / 1e6;
  } catch {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS; // utime, stime
  }
}

/** CPU time (ms) of a process and its children (an agent with workers: the primary and every worker; nginx's master and workers). */
export function treeCpuMs(pid: number): number {
  let ms = cpuMsOf(pid);
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      for (const child of fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean)) ms += treeCpuMs(Number(child));
    }
  } catch {
    // gone meanwhile
  }
  return ms;
}

/** Resident set size (bytes) of a process, from /proc/<pid>/status. */
export function rssOf(pid: number): number {
  const line = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return line ? Number(line[1]) * 1024 : NaN;
}

/** Wall-clock milliseconds with sub-millisecond resolution, comparable between processes of one host. */
export const wallNow = (): number => performance.timeOrigin + performance.now();

export const mib = (bytes: number): string => (bytes / 1024 / 1024).toFixed(0);

export const loadAverage = (): string => os.loadavg().map((l) => l.toFixed(2)).join(' / ');
