// Reconnect delays of the control stream: capped exponential backoff with full
// jitter (a uniformly random delay between 0 and min(cap, base × 2^attempt)),
// so that a thousand agents cut off by one control-plane restart do not all
// come back in the same instant.

export interface BackoffOptions {
  /** Upper bound of the first delay (default 250 ms). */
  baseMs: number;
  /** Largest upper bound (default 30 s). */
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 250, capMs: 30_000 };

/** The upper bound of the delay before retry number `attempt` (0 for the first retry). */
export function backoffCeiling(attempt: number, options: BackoffOptions = DEFAULT_BACKOFF): number {
  // 2^attempt overflows to Infinity long after it passed the cap; min keeps it finite.
  return Math.min(options.capMs, options.baseMs * 2 ** Math.max(0, attempt));
}

/** Full jitter: uniform in [0, ceiling). `random` is Math.random unless a test pins it. */
export function backoffDelay(attempt: number, options: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  return Math.floor(random() * backoffCeiling(attempt, options));
}

/** Counts failed attempts; a stream that stayed up long enough resets the count. */
export class Backoff {
  private attempt = 0;
  private readonly options: BackoffOptions;
  private readonly random: () => number;

  constructor(options: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random) {
    this.options = options;
    this.random = random;
  }

  /** The delay before the next attempt, counting this failure. */
  next(): number {
    return backoffDelay(this.attempt++, this.options, this.random);
  }

  /** The longest delay (used while the token is refused: the operator has to fix it). */
  atCap(): number {
    this.attempt++;
    return this.options.capMs;
  }

  reset(): void {
    this.attempt = 0;
  }

  get attempts(): number {
    return this.attempt;
  }
}
