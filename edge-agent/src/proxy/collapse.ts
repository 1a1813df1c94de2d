// Request collapsing: one origin fetch per cache key at a time. The first
// request (the leader) runs the cache fill; requests for the same key arriving
// meanwhile (followers) wait for its shared outcome: the stored object, the
// origin error, or "not shareable" (then each goes to the origin itself).
// A fill a viewer started is abandoned when nobody waits for it any more (its
// leader and every follower left) before it committed to storing an object:
// its origin request is cancelled, and the next request for the key leads a
// fill of its own. Background fills (refreshes, range fills) always finish.
import type { ServerResponse } from 'node:http';
import type { CacheStatus } from '../metrics/traffic.ts';
import type { CachedObject } from '../cache/index.ts';
import { OriginError } from './origin-client.ts';
import type { FillControl, FillResult } from './storing.ts';

const ERROR_STATUSES_FOR_STALE = new Set([500, 502, 503, 504]);

/** What followers learn from the leader's fill. */
export interface SharedFetch {
  entry: CachedObject | null;
  status: CacheStatus;
  /** The origin failed (error or 5xx): followers may fall back to stale-if-error. */
  error: OriginError | null;
  failedStatus: number;
}

export function isErrorStatusForStale(status: number): boolean {
  return ERROR_STATUSES_FOR_STALE.has(status);
}

/** A fill under way: who waits for it, and whether it may still be abandoned. */
class Flight implements FillControl {
  private readonly controller = new AbortController();
  readonly signal = this.controller.signal;
  shared!: Promise<SharedFetch>;
  private waiters = 0;
  private committed = false;
  private readonly watched: { res: ServerResponse; onClose: () => void }[] = [];
  /** Called when it is abandoned; null: never abandoned (a background fill: the cache's own work). */
  private readonly abandon: (() => void) | null;

  constructor(abandon: (() => void) | null) {
    this.abandon = abandon;
  }

  commit(): void {
    this.committed = true;
  }

  /** A viewer waits for this fill until its answer went out; its leaving before then is counted. */
  watch(res: ServerResponse): void {
    this.waiters++;
    const onClose = () => {
      // writableEnded: the answer was given (HTTP/2's response also says "finished" when its stream is cut).
      if (res.writableEnded || --this.waiters > 0) return;
      this.give();
    };
    // A viewer gone already (a stream reset before its request was handled) waits for nothing.
    if (res.destroyed) return onClose();
    res.once('close', onClose);
    this.watched.push({ res, onClose });
  }

  /** Nobody waits: abandoned, unless it is the cache's own work or already committed. */
  private give(): void {
    if (this.committed || this.abandon === null || this.signal.aborted) return;
    this.abandon();
    this.controller.abort(new Error('nobody waits for this fill any more'));
  }

  /** The fill ended: its viewers' leaving no longer matters to it. */
  settle(): void {
    for (const { res, onClose } of this.watched) res.off('close', onClose);
    this.watched.length = 0;
  }
}

export class Collapser {
  private readonly inflight = new Map<string, Flight>();
  private running = 0;
  private idleWaiters: (() => void)[] = [];
  /** Followers that joined a running fill, since start (tests). */
  joined = 0;

  /** True while a fill for the key runs. */
  has(key: string): boolean {
    return this.inflight.has(key);
  }

  /** The running fill's shared outcome, for a follower whose viewer (res) now waits for it too. */
  join(key: string, res: ServerResponse): Promise<SharedFetch> | undefined {
    const flight = this.inflight.get(key);
    if (flight === undefined) return undefined;
    this.joined++;
    flight.watch(res);
    return flight.shared;
  }

  /**
   * Runs the fill as the leader for key. With share false (a request carrying
   * Authorization) it runs alone: nobody joins it. viewer: the leader's
   * response (its leaving counts); null for a background fill, which is never
   * abandoned.
   */
  lead(key: string, share: boolean, viewer: ServerResponse | null, fill: (control: FillControl) => Promise<FillResult>): Promise<FillResult> {
    const flight: Flight = new Flight(viewer === null ? null : () => {
      // Abandoned: a request arriving now must lead its own fill, not join a cancelled one.
      if (this.inflight.get(key) === flight) this.inflight.delete(key);
    });
    if (!share) {
      if (viewer !== null) flight.watch(viewer);
      return fill(flight).finally(() => flight.settle());
    }
    let resolveShared!: (s: SharedFetch) => void;
    flight.shared = new Promise<SharedFetch>((r) => (resolveShared = r));
    this.inflight.set(key, flight);
    this.running++;
    if (viewer !== null) flight.watch(viewer);
    const done = (s: SharedFetch) => {
      flight.settle();
      if (this.inflight.get(key) === flight) this.inflight.delete(key);
      resolveShared(s);
      if (--this.running === 0 && this.idleWaiters.length > 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    };
    return fill(flight).then(
      (result) => {
        if (result.type === 'stored' || result.type === 'sliced') done({ entry: result.entry, status: result.status, error: null, failedStatus: 0 });
        else if (result.type === 'error') done({ entry: null, status: 'MISS', error: result.error, failedStatus: 0 });
        else done({ entry: null, status: 'MISS', error: null, failedStatus: isErrorStatusForStale(result.response.statusCode) ? result.response.statusCode : 0 });
        return result;
      },
      (err: unknown) => {
        done({ entry: null, status: 'MISS', error: err instanceof OriginError ? err : new OriginError('protocol', String(err)), failedStatus: 0 });
        throw err;
      },
    );
  }

  /** Resolves once no fill is running (background refreshes and range fills included). */
  settled(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
