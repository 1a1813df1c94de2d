// Preloaded into a process a test starts (`clockShiftEnv(file)` gives the
// environment: NODE_OPTIONS=--import this file), it moves the process's wall
// clock — Date.now() and `new Date()` — by the number of milliseconds written
// in the file, read again every 100 ms, so a test can let hours pass for a
// running agent (a rotation's grace period ending) without waiting for them.
// Timers and the monotonic clock (performance.now, process.hrtime) are left
// alone. Nothing happens without TEST_CLOCK_OFFSET_FILE.
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.env.TEST_CLOCK_OFFSET_FILE;

function readOffset(path: string): number {
  try {
    const value = Number(readFileSync(path, 'utf8').trim());
    return Number.isFinite(value) ? value : 0;
  } catch {
    return 0;
  }
}

if (file) {
  let offset = readOffset(file);
  const realNow = Date.now;
  const RealDate = Date;
  const shiftedNow = () => realNow() + offset;
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(shiftedNow());
      else super(...(args as [string]));
    }
    static override now(): number {
      return shiftedNow();
    }
  }
  globalThis.Date = ShiftedDate as DateConstructor;
  setInterval(() => { offset = readOffset(file); }, 100).unref();
}

/** The environment that preloads this module in a child process, reading its offset from `offsetFile`. */
export function clockShiftEnv(offsetFile: string): Record<string, string> {
  // The module's file: URL (percent-encoded, so a path with spaces survives NODE_OPTIONS' splitting).
  const preload = `--import=${import.meta.url}`;
  return { NODE_OPTIONS: [process.env.NODE_OPTIONS, preload].filter(Boolean).join(' '), TEST_CLOCK_OFFSET_FILE: offsetFile };
}

/** Moves the clock of every process reading `offsetFile` by `offsetMs` from real time (0 sets it back). */
export function setClockOffset(offsetFile: string, offsetMs: number): void {
  writeFileSync(offsetFile, String(offsetMs));
}
