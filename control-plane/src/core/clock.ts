// The time the platform works with. Everything that decides by the clock
// (jobs becoming due, retries, leases, later billing periods and expiring
// links) asks a Clock instead of calling Date.now(), so a test can move time
// (`clock.advance(30 * DAY)`) and see what becomes due without waiting.

export interface Clock {
  now(): Date;
}

/** Production time. */
export const systemClock: Clock = { now: () => new Date() };

export const SECOND = 1_000;
export const MINUTE = 60 * SECOND;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

/** A clock that moves only when told to (tests). */
export class ManualClock implements Clock {
  #ms: number;

  constructor(start: Date | number = Date.now()) {
    this.#ms = typeof start === 'number' ? start : start.getTime();
  }

  now(): Date {
    return new Date(this.#ms);
  }

  /** Moves forward by `ms` milliseconds (never backwards: time that went back would reorder due work). */
  advance(ms: number): Date {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`ManualClock.advance: ${ms} is not a non-negative number of milliseconds`);
    this.#ms += ms;
    return this.now();
  }

  /** Jumps to a point in time (forwards or backwards). */
  set(to: Date | number): Date {
    const ms = typeof to === 'number' ? to : to.getTime();
    if (!Number.isFinite(ms)) throw new RangeError('ManualClock.set: not a valid time');
    this.#ms = ms;
    return this.now();
  }
}
