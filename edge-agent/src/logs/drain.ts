// One log drain at the agent (issue 24 item 2): the batching, retry and
// buffer core every destination shares. Records are rendered in the drain's
// format as they come and queued in a buffer bounded in bytes; a batch is cut
// when it reaches its record or byte limit, or when its time is up, and sent
// by the destination client (shared/src/logs), one batch in flight at a time
// so records arrive in order. A failed batch is sent again, the same batch
// (same id: object keys and X-Batch-Id stay), after a backoff with jitter, for
// as long as the failure may pass (network, 5xx, 429, refused credentials);
// records queue meanwhile, so nothing is lost while the destination is down
// for less time than the buffer holds, and what does not fit is dropped and
// counted. A batch the destination refuses as such (400, 413, 422) is
// dropped and counted. A paused drain keeps queueing (within the buffer) and
// sends nothing; resumed, it continues where it stopped. The buffer is the
// worker's, shared by all its drains (buffer-budget.ts): every chunk and
// batch in flight is counted in it, and a drain holding the most gives up its
// newest chunk when another needs room.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { lineRenderer, lineWriter, type AccessRecord, type LineRenderer, type LineWriter } from '../../../shared/src/logs/access-record.ts';
import { createDestination } from '../../../shared/src/logs/destinations.ts';
import { DeliveryError, type Batch, type Destination, type DestinationContext, type DrainSpec } from '../../../shared/src/logs/destination.ts';
import { BufferBudget, MiB, type BufferHolder } from './buffer-budget.ts';

export { MiB };

export interface DrainLimits {
  /** Bound on the bytes held (queued and in flight) when the drain has no budget shared with others. */
  bufferBytes: number;
  batchMaxRecords: number;
  batchMaxBytes: number;
  /** A batch waits at most this long for more records. */
  flushIntervalMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
}

/** Per destination type: streaming intakes get small, frequent batches; object stores larger, rarer objects. */
export function defaultLimits(type: DrainSpec['destination_type'], bufferBytes: number, flushIntervalMs?: number): DrainLimits {
  const objects = type === 's3' || type === 'gcs';
  return {
    bufferBytes,
    // Datadog's intake takes at most 1,000 entries and 5 MB per request.
    batchMaxRecords: type === 'datadog' ? 1000 : objects ? 200_000 : 5_000,
    batchMaxBytes: type === 'datadog' ? 4 * MiB : objects ? 16 * MiB : 2 * MiB,
    flushIntervalMs: flushIntervalMs ?? (objects ? 60_000 : 2_000),
    retryBaseMs: 500,
    retryMaxMs: 30_000,
  };
}

export type DrainStatus = 'active' | 'error' | 'paused';

export interface DrainStats {
  status: DrainStatus;
  lastError: string;
  recordsShipped: number;
  recordsDropped: number;
  batchesSent: number;
  batchesFailed: number;
  bufferedBytes: number;
  bufferedRecords: number;
  lastDeliveredAtMs: number;
}

/** Whole lines as UTF-8, each followed by a newline, with their records' times and ids. */
interface Chunk {
  buf: Buffer;
  used: number;
  count: number;
  times: number[];
  ids: string[];
}

export interface DrainEvents {
  /** A batch was delivered (seconds from its first attempt to the destination's answer). */
  delivered?(drain: Drain, seconds: number, records: number): void;
}

export class Drain implements BufferHolder {
  readonly id: string;
  private spec: DrainSpec;
  private destination: Destination;
  private render: LineRenderer;
  /** Writes a record's line straight into a chunk (null: only the renderer). */
  private write: LineWriter | null;
  private readonly limits: DrainLimits;
  private readonly context: DestinationContext;
  private readonly logger: Logger;
  private readonly events: DrainEvents;
  /**
   * Queued records not yet in a batch, as bytes: chunks each holding whole lines (line + newline), within the
   * batch limits, so a batch is whole chunks. The last chunk is the one being written.
   */
  private chunks: Chunk[] = [];
  private queuedBytes = 0;
  private queuedRecords = 0;
  private inflight: Batch | null = null;
  private timer: NodeJS.Timeout | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private failures = 0;
  private closed = false;
  private paused: boolean;
  private pumping = false;
  private readonly idle = new Set<() => void>();
  readonly stats: DrainStats;
  /** The memory its records are held in: the worker's, shared with its other drains (or its own, of limits.bufferBytes). */
  private readonly budget: BufferBudget;
  /** Capacity of the buffers it holds from the budget: its chunks and its batch in flight. */
  private held = 0;

  constructor(
    spec: DrainSpec & { status?: string }, limits: DrainLimits, context: DestinationContext, logger: Logger, events: DrainEvents = {},
    budget: BufferBudget = new BufferBudget(limits.bufferBytes),
  ) {
    this.id = spec.id;
    this.budget = budget;
    budget.join(this);
    this.spec = spec;
    this.limits = limits;
    this.context = context;
    this.logger = logger;
    this.events = events;
    this.destination = createDestination(spec, context);
    this.render = lineRenderer(this.destination.lineFormat, spec.fields);
    this.write = lineWriter(this.destination.lineFormat, spec.fields);
    this.paused = spec.status === 'paused';
    this.stats = {
      status: this.paused ? 'paused' : 'active', lastError: '', recordsShipped: 0, recordsDropped: 0, batchesSent: 0, batchesFailed: 0,
      bufferedBytes: 0, bufferedRecords: 0, lastDeliveredAtMs: 0,
    };
  }

  get destinationType(): DrainSpec['destination_type'] {
    return this.spec.destination_type;
  }

  /** Whether its records need a request id (a field it ships, or its destination keys documents by it). */
  get needsRequestId(): boolean {
    return this.destination.needsIds === true || this.readsField('request_id');
  }

  /** Whether it ships the field (fields empty: every field). */
  readsField(field: string): boolean {
    return this.spec.fields.length === 0 || this.spec.fields.includes(field);
  }

  /** A new configuration of the same drain: the destination and rendering change, the queue stays (records already rendered ship as they are). */
  update(spec: DrainSpec & { status?: string }): void {
    if (JSON.stringify([spec.destination_type, spec.destination_config, spec.log_format, spec.fields])
      !== JSON.stringify([this.spec.destination_type, this.spec.destination_config, this.spec.log_format, this.spec.fields])) {
      this.destination = createDestination(spec, this.context);
      this.render = lineRenderer(this.destination.lineFormat, spec.fields);
      this.write = lineWriter(this.destination.lineFormat, spec.fields);
      this.failures = 0;
    }
    this.spec = spec;
    this.setPaused(spec.status === 'paused');
  }

  setPaused(paused: boolean): void {
    if (paused === this.paused) return;
    this.paused = paused;
    this.stats.status = paused ? 'paused' : this.stats.lastError ? 'error' : 'active';
    if (!paused) {
      this.failures = 0;
      if (this.retryTimer) {
        clearTimeout(this.retryTimer);
        this.retryTimer = null;
      }
      void this.pump();
    }
  }

  /** Queues one record (dropped and counted when the buffer is full). Never throws, never waits. */
  push(record: AccessRecord): void {
    if (this.closed) return;
    const chunks = this.chunks;
    let chunk = chunks.length === 0 ? undefined : chunks[chunks.length - 1]!;
    if (chunk !== undefined && chunk.count < this.limits.batchMaxRecords && this.write !== null) {
      // The common case: the line is written straight into the last chunk (no string per line), within the
      // chunk's room (already counted in the budget), its newline's byte kept. What does not fit takes the way below.
      const pos = this.write(record, chunk.buf, chunk.used, chunk.buf.length - 1);
      if (pos >= 0) {
        chunk.buf[pos] = 10;
        this.queuedBytes += pos + 1 - chunk.used;
        chunk.used = pos + 1;
        this.counted(chunk, record);
        return;
      }
    }
    // A first chunk, a full one: the line as text, measured, and a new chunk from the budget if it does not fit.
    const line = this.render(record);
    const bytes = Buffer.byteLength(line) + 1;
    if (chunk !== undefined && (chunk.buf.length - chunk.used < bytes || chunk.count >= this.limits.batchMaxRecords)) chunk = undefined;
    if (chunk === undefined) {
      const buf = this.budget.take(this, Math.max(this.budget.chunkBytes(this.chunkBytes), bytes));
      if (buf === null) {
        this.dropped(1);
        return;
      }
      this.held += buf.length;
      chunk = { buf, used: 0, count: 0, times: [], ids: [] };
      chunks.push(chunk);
    }
    const written = chunk.buf.write(line, chunk.used, 'utf8');
    chunk.buf[chunk.used + written] = 10;
    chunk.used += written + 1;
    this.queuedBytes += written + 1;
    this.counted(chunk, record);
  }

  /** Records dropped because the buffer is full (its own, or given up to another drain): counted, the status says so. */
  private dropped(records: number): void {
    const before = this.stats.recordsDropped;
    this.stats.recordsDropped += records;
    if (before === 0 || Math.floor(before / 10_000) !== Math.floor(this.stats.recordsDropped / 10_000)) {
      this.logger.warn({ drain: this.id, dropped: this.stats.recordsDropped, buffer_bytes: this.budget.bytes, drains: this.budget.drains }, 'log drain buffer full: records dropped');
    }
    this.stats.lastError = `buffer full (${this.budget.bytes} bytes shared by ${this.budget.drains} drain${this.budget.drains === 1 ? '' : 's'}): `
      + `${this.stats.recordsDropped} records dropped`;
    if (!this.paused) this.stats.status = 'error';
  }

  get heldBytes(): number {
    return this.held;
  }

  get sheddable(): boolean {
    return this.chunks.length > 0;
  }

  /** Gives up its newest queued chunk to another drain that needs room (BufferBudget.take): its records are dropped and counted. */
  shed(): Buffer | null {
    const chunk = this.chunks.pop();
    if (chunk === undefined) return null;
    this.queuedBytes -= chunk.used;
    this.queuedRecords -= chunk.count;
    this.held -= chunk.buf.length;
    this.dropped(chunk.count);
    return chunk.buf;
  }

  /** A record's line is in the chunk: counted, its time and id kept, and the batch sent or timed. */
  private counted(chunk: Chunk, record: AccessRecord): void {
    chunk.count++;
    chunk.times.push(record.timestamp);
    if (this.destination.needsIds) chunk.ids.push(record.request_id);
    this.queuedRecords++;
    this.queued();
  }

  /** After a record was queued: a full batch goes now, otherwise the batch timer runs. */
  private queued(): void {
    if (this.queuedRecords >= this.limits.batchMaxRecords || this.queuedBytes >= this.limits.batchMaxBytes) void this.pump();
    else if (this.timer === null) {
      this.timer = setTimeout(() => {
        this.timer = null;
        void this.pump(true);
      }, this.limits.flushIntervalMs);
      this.timer.unref();
    }
  }

  /**
   * A chunk holds a whole batch's bytes (at most 4 MiB), so a batch is usually one chunk sent as it is, and the
   * chunk is used again once its batch is delivered: a busy drain allocates no new buffer per batch (large
   * allocations outside the heap make V8 collect garbage sooner).
   */
  private get chunkBytes(): number {
    return Math.min(4 * MiB, Math.max(4096, this.limits.batchMaxBytes));
  }

  /** The chunk the batch in flight is a view of (given back when it is done); null when the batch was made of several. */
  private inflightChunk: Buffer | null = null;

  /** The batch in flight is done (delivered or dropped): its memory goes back to the budget. */
  private release(): void {
    if (this.inflight === null) return;
    if (this.inflightChunk !== null) {
      this.held -= this.inflightChunk.length;
      this.budget.give(this.inflightChunk);
    } else {
      this.held -= this.inflight.body.length;
      this.budget.release(this.inflight.body.length);
    }
    this.inflightChunk = null;
    this.inflight = null;
  }

  /** Buffered bytes (of records, as written) and records, queued and in flight. */
  get buffered(): { bytes: number; records: number } {
    return { bytes: this.queuedBytes + (this.inflight?.body.length ?? 0), records: this.queuedRecords + (this.inflight?.count ?? 0) };
  }

  snapshot(): DrainStats {
    const b = this.buffered;
    this.stats.bufferedBytes = b.bytes;
    this.stats.bufferedRecords = b.records;
    return { ...this.stats };
  }

  /** Cuts the next batch from the queue: whole chunks, within the batch limits (at least one). */
  private cut(): Batch {
    let n = 0;
    let bytes = 0;
    let records = 0;
    while (n < this.chunks.length) {
      const c = this.chunks[n]!;
      if (n > 0 && (bytes + c.used > this.limits.batchMaxBytes || records + c.count > this.limits.batchMaxRecords)) break;
      bytes += c.used;
      records += c.count;
      n++;
    }
    const taken = this.chunks.splice(0, n);
    this.inflightChunk = taken.length === 1 ? taken[0]!.buf : null;
    const body = taken.length === 1 ? taken[0]!.buf.subarray(0, taken[0]!.used) : Buffer.concat(taken.map((c) => c.buf.subarray(0, c.used)), bytes);
    if (taken.length > 1) {
      // The batch is a copy of its chunks: they are let go, and the copy is held instead.
      for (const c of taken) this.budget.release(c.buf.length);
      this.budget.charge(body.length);
      this.held += body.length - taken.reduce((sum, c) => sum + c.buf.length, 0);
    }
    this.queuedBytes -= bytes;
    this.queuedRecords -= records;
    return { id: randomUUID(), body, count: records, times: taken.flatMap((c) => c.times), ids: taken.flatMap((c) => c.ids) };
  }

  /** Sends batches while there is something to send and the drain may (`due`: the flush interval is up, a partial batch goes). */
  private async pump(due = false): Promise<void> {
    if (this.pumping || this.closed) return;
    this.pumping = true;
    try {
      while (!this.closed && !this.paused && this.retryTimer === null) {
        if (this.inflight === null) {
          const full = this.queuedRecords >= this.limits.batchMaxRecords || this.queuedBytes >= this.limits.batchMaxBytes;
          if (this.queuedRecords === 0 || !(full || due || this.closing)) break;
          this.inflight = this.cut();
          // Only this batch was due: records queued while it is sent wait for their own time or a full batch (a
          // due pump that kept cutting sent a small batch per round trip for as long as records kept coming).
          due = false;
        }
        const batch = this.inflight;
        const started = performance.now();
        try {
          await this.destination.send(batch);
        } catch (err) {
          // A destination client says what failed in a DeliveryError (scrubbed); another error's text is not shown (it may quote a credential).
          const e = err instanceof DeliveryError ? err : new DeliveryError(`the destination client failed (${(err as Error).name ?? 'error'})`, true);
          this.stats.batchesFailed++;
          this.stats.lastError = e.message;
          this.stats.status = this.paused ? 'paused' : 'error';
          if (!e.retryable) {
            // The destination refuses this batch as such: sending it again would fail the same way.
            this.stats.recordsDropped += batch.count;
            this.release();
            this.logger.warn({ drain: this.id, records: batch.count, err: e.message }, 'log drain batch refused by the destination: dropped');
            continue;
          }
          this.failures++;
          if (this.failures === 1) this.logger.warn({ drain: this.id, err: e.message }, 'log drain delivery failed; retrying');
          const exp = Math.min(this.limits.retryMaxMs, this.limits.retryBaseMs * 2 ** Math.min(this.failures - 1, 20));
          const delay = exp / 2 + Math.random() * (exp / 2);
          this.retryTimer = setTimeout(() => {
            this.retryTimer = null;
            void this.pump(true);
          }, delay);
          this.retryTimer.unref();
          break;
        }
        this.release();
        if (this.failures > 0) this.logger.info({ drain: this.id, failures: this.failures }, 'log drain delivering again');
        this.failures = 0;
        this.stats.recordsShipped += batch.count;
        this.stats.batchesSent++;
        this.stats.lastDeliveredAtMs = Date.now();
        this.stats.lastError = '';
        this.stats.status = this.paused ? 'paused' : 'active';
        this.events.delivered?.(this, (performance.now() - started) / 1000, batch.count);
      }
    } finally {
      this.pumping = false;
      if (this.closed) {
        // Closed while a batch was being sent: its memory goes back now, and it is not tried again.
        this.release();
        if (this.retryTimer) clearTimeout(this.retryTimer);
        this.retryTimer = null;
      }
      if (this.queuedRecords > 0 && this.timer === null && this.retryTimer === null && !this.paused && !this.closed) {
        this.timer = setTimeout(() => {
          this.timer = null;
          void this.pump(true);
        }, this.limits.flushIntervalMs);
        this.timer.unref();
      }
      if (this.inflight === null && this.queuedRecords === 0) for (const resolve of this.idle) resolve();
    }
  }

  private closing = false;

  /** Sends what is queued now (ignoring the batch timer); resolves when the queue is empty or `timeoutMs` passed. */
  async flush(timeoutMs: number): Promise<void> {
    if (this.paused) return;
    this.closing = true;
    const empty = new Promise<void>((resolve) => {
      if (this.inflight === null && this.queuedRecords === 0) resolve();
      else this.idle.add(resolve);
    });
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    void this.pump(true);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([empty, new Promise<void>((resolve) => { timer = setTimeout(resolve, timeoutMs); })]);
    clearTimeout(timer);
    this.closing = false;
  }

  /** Stops for good (the drain was deleted, or the agent stops): queued records are dropped, their memory given back. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const c of this.chunks.splice(0)) {
      this.held -= c.buf.length;
      this.budget.release(c.buf.length);
    }
    this.queuedBytes = this.queuedRecords = 0;
    this.budget.leave(this);
    // A batch being sent is let go when its send ends (pump).
    if (!this.pumping) this.release();
    if (this.timer) clearTimeout(this.timer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.timer = this.retryTimer = null;
    for (const resolve of this.idle) resolve();
  }
}
