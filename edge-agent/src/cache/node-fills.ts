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

/** How often each turn was given (metrics: a follow is a wait for another worker's fill). */
export type FillTurns = Record<FillTurn, number>;

export interface NodeFillLock {
  acquire(key: string): Promise<FillTurn>;
  release(key: string): void;
}

/**
 * Runs work as the node's one filler of key: with no lock, or no answer from it in time, alone; after another
 * worker's fill of the key, what it kept (stored()) or, when it kept nothing usable, work; as the leader, work,
 * then kept(result) (its object reaches the node tier), then the lock is released. turns counts the answers.
 */
export async function fillOnce<T>(lock: NodeFillLock | null, key: string, work: () => Promise<T>, stored: () => T | undefined, kept: (result: T) => Promise<void>, turns: FillTurns): Promise<T> {
  if (lock === null) return work();
  const turn = await lock.acquire(key);
  turns[turn]++;
  if (turn === 'follow') return stored() ?? work();
  if (turn === 'alone') return work();
  try {
    const result = await work();
    await kept(result);
    return result;
  } finally {
    lock.release(key);
  }
}
