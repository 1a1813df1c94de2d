// Request collapsing: one origin fetch per cache key at a time. The first
// request (the leader) runs the cache fill; requests for the same key arriving
// meanwhile (followers) wait for its shared outcome: the stored object, the
// origin error, or "not shareable" (then each goes to the origin itself).
import type { CacheStatus } from '../metrics/traffic.ts';
import type { CachedObject } from './cache-store.ts';
import { OriginError } from './origin-client.ts';
import type { FillResult } from './storing.ts';

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

export class Collapser {
  private readonly inflight = new Map<string, Promise<SharedFetch>>();
  private idleWaiters: (() => void)[] = [];

  /** True while a fill for the key runs. */
  has(key: string): boolean {
    return this.inflight.has(key);
  }

  /** The running fill's shared outcome, for a follower. */
  pending(key: string): Promise<SharedFetch> | undefined {
    return this.inflight.get(key);
  }

  /**
   * Runs the fill as the leader for key. With share false (a request carrying
   * Authorization) it runs alone: nobody joins it.
   */
  lead(key: string, share: boolean, fill: () => Promise<FillResult>): Promise<FillResult> {
    if (!share) return fill();
    let resolveShared!: (s: SharedFetch) => void;
    this.inflight.set(key, new Promise<SharedFetch>((r) => (resolveShared = r)));
    const done = (s: SharedFetch) => {
      this.inflight.delete(key);
      resolveShared(s);
      if (this.inflight.size === 0 && this.idleWaiters.length > 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    };
    return fill().then(
      (result) => {
        if (result.type === 'stored') done({ entry: result.entry, status: result.status, error: null, failedStatus: 0 });
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
    if (this.inflight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
