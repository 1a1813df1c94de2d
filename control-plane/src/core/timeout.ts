// Bounding a wait that has no cancellation of its own (every network wait has a timeout).

/** Resolves or rejects as `promise` does, or rejects with `timeoutError()` after `ms` milliseconds, whichever comes first. */
export function withTimeout<T>(promise: Promise<T>, ms: number, timeoutError: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(timeoutError()), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
