// A session's `last_active_at` follows the use of its access tokens, not only
// of its refresh token (issue 20): every authenticated request marks its
// session active, at most once per session and clock minute across replicas.
// A replica remembers which sessions it marked this minute (no round trip
// for the rest of it); the first replica to mark one in a minute is elected by
// a Redis key set only if absent, and only it writes the row. So a client
// calling all day costs one Redis command per replica and one update per
// minute, whatever its request rate.
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { MINUTE, type Clock } from '../core/clock.ts';
import type { Database } from '../db/orm.ts';
import type { KeyValueStore } from '../store/index.ts';

/** Marks a session active now (at most once per minute); never throws. */
export type SessionActivity = (sessionId: string) => Promise<void>;

export function sessionActivity(app: { store: KeyValueStore; db: Database; clock: Clock; log: Logger }): SessionActivity {
  const marked = new LRUCache<string, number>({ max: 100_000 });
  return async (sessionId) => {
    const now = app.clock.now();
    const minute = Math.floor(now.getTime() / MINUTE);
    if (marked.get(sessionId) === minute) return;
    marked.set(sessionId, minute);
    try {
      if (!(await app.store.set(`session-active:${sessionId}:${minute}`, '1', { ttlMs: 2 * MINUTE, onlyIfAbsent: true }))) return;
      await app.db.orm.em.getConnection().execute(
        'update auth_session set last_active_at = ? where id = ? and revoked_at is null and last_active_at < ?', [now, sessionId, now]);
    } catch (error) {
      // Bookkeeping: a store or database hiccup must not fail the request it rides on.
      app.log.warn({ err: error }, 'could not mark a session active');
    }
  };
}
