// One origin fetch per object per node (cross-process single flight): before a
// worker fills a key from the origin it asks the node's fill lock, held by the
// agent's primary (workers/fill-locks.ts). The first asker leads; the others
// wait until its fill ended and then read the node tier, where the object is
// if it could be kept. Within one worker, Collapser already joins requests to
// one fill; this joins the workers.

/**
 * lead: this worker fills the key and must call release(key) after its object is in the node tier (or is not
 * going to be); follow: another worker's fill of the key ended, look in the node tier first; alone: no answer
 * in time (or no primary): fill without the lock, and release nothing.
 */
export type FillTurn = 'lead' | 'follow' | 'alone';

export interface NodeFillLock {
  acquire(key: string): Promise<FillTurn>;
  release(key: string): void;
}
