// What the CDN capability announces once it is stored, for whoever delivers it
// to the edge (the control channel, edge-channel, subscribes on
// every replica). Messages go through the platform's store pub/sub (Redis
// across replicas, in-process when embedded) after the commit. A lost message
// delays delivery but loses nothing: the channel also polls for what it has
// not seen (purges by sequence, prefetch jobs still pending).
import type { CoreServices } from '../core/services.ts';
import type { RequestContext } from '../core/request-context.ts';
import { afterCommit } from '../core/request-context.ts';

/** A purge request was stored: a PurgeAnnouncement. */
export const PURGE_SUBMITTED_CHANNEL = 'cdn:purge-submitted';

/**
 * Its sequence and, unless it is large, the purge itself (what an edge node is sent): a replica
 * holding every purge before it pushes it at once; otherwise it reads what it lacks from the database.
 */
export interface PurgeAnnouncement {
  sequence: number;
  /** distribution_id null: a purge of every endpoint. */
  purge?: { id: string; sequence: number; distribution_id: string | null; purge_type: 'path' | 'wildcard' | 'tag' | 'all'; paths: string[]; tags: string[]; soft: boolean };
}
/** A prefetch job was stored: {"job_id": <uuid>}. */
export const PREFETCH_SUBMITTED_CHANNEL = 'cdn:prefetch-submitted';

/** Publishes `message` on `channel` once rc's transaction has committed; a store error is logged, never thrown (the work is stored). */
export function announce(services: Pick<CoreServices, 'store'>, rc: RequestContext, channel: string, message: object): void {
  afterCommit(rc, () => {
    services.store.publish(channel, JSON.stringify(message)).catch((error: unknown) => {
      rc.log.warn({ err: error, channel }, 'announcement not published; the edge channel picks the work up on its next poll');
    });
  });
}
