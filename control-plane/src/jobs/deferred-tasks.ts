// Work a request hands off to run after it has answered: e-mail whose sending
// (and whose database look-ups) must not show in the response time, such as
// the reset link of forgot-password, which would otherwise tell a known
// address from an unknown one. In-process for now; the durable job mechanism
// of DESIGN.md §3 replaces this module behind the same `defer` call.
//
// A task never throws into anything: its errors are logged. `close()` stops
// taking tasks and waits for those already queued (server shutdown), and
// `idle()` lets tests wait until everything handed off has finished.
import type { Logger } from 'pino';

export type DeferredTask = () => Promise<void>;

export class DeferredTasks {
  readonly #log: Logger;
  readonly #running = new Set<Promise<void>>();
  #closed = false;

  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Runs `task` on a later turn of the event loop, after the caller has
   * returned (so after the handler's response is on its way). `name` labels
   * the task in the log; `log` (e.g. the request's logger) carries its context.
   */
  defer(name: string, task: DeferredTask, log: Logger = this.#log): void {
    if (this.#closed) {
      log.error({ task: name }, 'deferred task refused: shutting down');
      return;
    }
    const run = new Promise<void>((resolve) => setImmediate(resolve))
      .then(task)
      .catch((error: unknown) => log.error({ err: error, task: name }, 'deferred task failed'))
      .finally(() => this.#running.delete(run));
    this.#running.add(run);
  }

  /** Number of tasks queued or running. */
  get pending(): number {
    return this.#running.size;
  }

  /** Resolves once no task is queued or running (including tasks that tasks deferred). */
  async idle(): Promise<void> {
    while (this.#running.size) await Promise.allSettled([...this.#running]);
  }

  /** Refuses new tasks and waits for the queued ones (call before closing the database and mailer). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.idle();
  }
}
