// One memory budget for every log drain of a worker (LOG_DRAIN_BUFFER_BYTES).
// A drain holds its records in chunks (drain.ts); every chunk's capacity is
// taken from the budget, and so is a batch in flight, so what the drains hold
// together never passes it, however many there are and however many are slow
// or down (it was 64 MiB per drain: 134 drains reached 2.36 GB). A drain may
// use what the others leave; when the budget is full, a drain that needs room
// takes a chunk from the drain holding the most (that drain's newest queued
// records are dropped and counted, as its own overflow would be), and a drain
// that holds the most already drops its new records. Chunks get smaller as
// drains are added, so each can always hold a few.
export const MiB = 1024 * 1024;

/** What a drain shows the budget. */
export interface BufferHolder {
  /** Capacity of the buffers it holds (its chunks and its batch in flight). */
  readonly heldBytes: number;
  /** Whether it has queued records (a chunk it could shed). */
  readonly sheddable: boolean;
  /** Drops its newest queued chunk (its records counted as dropped) and gives up its buffer; null when nothing is queued. */
  shed(): Buffer | null;
}

/** Chunks a drain can hold at the least, when all the drains of the worker hold their share. */
const CHUNKS_PER_DRAIN = 4;
/** The smallest chunk (records longer than a chunk get a buffer of their own size). */
const MIN_CHUNK_BYTES = 4096;
/** The largest chunk: a batch of the streaming intakes is one chunk, sent as it is. */
const MAX_CHUNK_BYTES = 4 * MiB;

export class BufferBudget {
  readonly bytes: number;
  /** Capacity of every buffer the drains hold, and of the spares. */
  private held = 0;
  private readonly holders = new Set<BufferHolder>();
  /** Buffers of delivered batches, kept for the next chunks (counted in held). */
  private readonly spares: Buffer[] = [];

  constructor(bytes: number) {
    this.bytes = bytes;
  }

  /** Bytes held: by the drains and as spares. Never more than `bytes`. */
  get heldBytes(): number {
    return this.held;
  }

  get drains(): number {
    return this.holders.size;
  }

  join(holder: BufferHolder): void {
    this.holders.add(holder);
  }

  leave(holder: BufferHolder): void {
    this.holders.delete(holder);
    while (this.spares.length > 2 * this.holders.size) this.held -= this.spares.pop()!.length;
  }

  /** The size of a new chunk for batches of at most `batchBytes`: a share that lets every drain hold a few, within the budget. */
  chunkBytes(batchBytes: number): number {
    const share = Math.floor(this.bytes / (CHUNKS_PER_DRAIN * Math.max(1, this.holders.size)));
    return Math.min(this.bytes, Math.max(MIN_CHUNK_BYTES, Math.min(MAX_CHUNK_BYTES, batchBytes, share)));
  }

  /**
   * A buffer of at least `size` bytes for `holder`, counted in the budget: a spare, a new one while there is room,
   * or the newest chunk of the drain holding the most (when it holds more than `holder` would with this one).
   * Null when none may be had: the caller drops its record.
   */
  take(holder: BufferHolder, size: number): Buffer | null {
    const spare = this.spares.findIndex((b) => b.length >= size);
    if (spare >= 0) return this.spares.splice(spare, 1)[0]!;
    while (this.held + size > this.bytes && this.spares.length) this.held -= this.spares.pop()!.length;
    for (;;) {
      if (this.held + size <= this.bytes) {
        this.held += size;
        return Buffer.allocUnsafe(size);
      }
      const taken = this.largestOther(holder, size)?.shed() ?? null;
      if (taken === null) return null;
      if (taken.length >= size) return taken;
      this.held -= taken.length;
    }
  }

  /** The drain holding the most with records queued, when it holds more than `holder` would with `size` more. */
  private largestOther(holder: BufferHolder, size: number): BufferHolder | null {
    let largest: BufferHolder | null = null;
    for (const h of this.holders) if (h !== holder && h.sheddable && (largest === null || h.heldBytes > largest.heldBytes)) largest = h;
    return largest !== null && largest.heldBytes > holder.heldBytes + size ? largest : null;
  }

  /** A buffer a drain no longer needs: kept for the next chunk (at most two per drain) or let go. */
  give(buf: Buffer): void {
    if (this.spares.length < 2 * this.holders.size) this.spares.push(buf);
    else this.held -= buf.length;
  }

  /** Bytes let go (a buffer dropped, a batch delivered that was not a chunk). */
  release(bytes: number): void {
    this.held -= bytes;
  }

  /** Bytes held outside chunks (a batch made of several chunks), always in exchange for chunks released just before. */
  charge(bytes: number): void {
    this.held += bytes;
  }
}
