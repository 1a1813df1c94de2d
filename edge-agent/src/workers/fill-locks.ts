// The node's fill locks (cache/node-fills.ts): the primary's table of which
// worker fills which key, and each worker's side of it over the cluster IPC.
// The first worker to ask for a key leads; workers asking while it fills wait
// and are all told "follow" when it is done, or when it exits. A worker that
// hears nothing within the wait fills alone (as nginx's proxy_cache_lock_timeout).
import type { FillTurn, NodeFillLock } from '../cache/index.ts';

/** How long a worker waits for another worker's fill before it fetches the object itself. */
export const FILL_WAIT_MS = 10_000;

/** A turn to tell a worker: its ticket's answer. */
export interface TurnNotice {
  worker: number;
  ticket: number;
  key: string;
  lead: boolean;
}

interface Held {
  holder: number;
  waiters: { worker: number; ticket: number }[];
}

/** The primary's table: pure bookkeeping, the caller sends the notices it returns. */
export class FillLocks {
  private readonly held = new Map<string, Held>();

  get size(): number {
    return this.held.size;
  }

  /** A worker asks to fill key: granted at once (a notice) when nobody fills it, else it waits (no notice). */
  request(worker: number, ticket: number, key: string): TurnNotice[] {
    const held = this.held.get(key);
    if (held === undefined) {
      this.held.set(key, { holder: worker, waiters: [] });
      return [{ worker, ticket, key, lead: true }];
    }
    held.waiters.push({ worker, ticket });
    return [];
  }

  /** The holder's fill of key ended: every waiter follows. */
  done(worker: number, key: string): TurnNotice[] {
    const held = this.held.get(key);
    if (held === undefined || held.holder !== worker) return [];
    this.held.delete(key);
    return held.waiters.map((w) => ({ ...w, key, lead: false }));
  }

  /** A waiter gave up (its wait ran out). */
  cancel(worker: number, ticket: number, key: string): void {
    const held = this.held.get(key);
    if (held !== undefined) held.waiters = held.waiters.filter((w) => w.worker !== worker || w.ticket !== ticket);
  }

  /** A worker exited: what it held is released to its waiters, and its own waits are dropped. */
  workerGone(worker: number): TurnNotice[] {
    const notices: TurnNotice[] = [];
    for (const [key, held] of this.held) {
      held.waiters = held.waiters.filter((w) => w.worker !== worker);
      if (held.holder === worker) notices.push(...this.done(worker, key));
    }
    return notices;
  }
}

/** What a worker sends its primary for the fill locks. */
export type FillLockMessage =
  | { t: 'fillLock'; ticket: number; key: string }
  | { t: 'fillCancel'; ticket: number; key: string }
  | { t: 'fillDone'; key: string };

/** A worker's side: asks the primary, waits up to waitMs for its turn. */
export class FillLockClient implements NodeFillLock {
  private readonly send: (msg: FillLockMessage) => boolean;
  private readonly waitMs: number;
  private nextTicket = 1;
  private readonly waiting = new Map<number, (turn: FillTurn) => void>();

  /** send: false when the primary cannot be reached. */
  constructor(send: (msg: FillLockMessage) => boolean, waitMs = FILL_WAIT_MS) {
    this.send = send;
    this.waitMs = waitMs;
  }

  acquire(key: string): Promise<FillTurn> {
    const ticket = this.nextTicket++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(ticket);
        this.send({ t: 'fillCancel', ticket, key });
        resolve('alone');
      }, this.waitMs);
      this.waiting.set(ticket, (turn) => {
        clearTimeout(timer);
        resolve(turn);
      });
      if (!this.send({ t: 'fillLock', ticket, key })) this.settle(ticket, 'alone');
    });
  }

  release(key: string): void {
    this.send({ t: 'fillDone', key });
  }

  /** The primary's answer for a ticket; a lead granted after the wait ran out is handed back at once. */
  turn(ticket: number, key: string, lead: boolean): void {
    if (!this.settle(ticket, lead ? 'lead' : 'follow') && lead) this.release(key);
  }

  /** Ends the ticket's wait with turn; false when it no longer waits. */
  private settle(ticket: number, turn: FillTurn): boolean {
    const waiter = this.waiting.get(ticket);
    if (waiter === undefined) return false;
    this.waiting.delete(ticket);
    waiter(turn);
    return true;
  }

  /** Every wait ends now, alone (the primary is gone). */
  abandon(): void {
    for (const waiter of this.waiting.values()) waiter('alone');
    this.waiting.clear();
  }
}
