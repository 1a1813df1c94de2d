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
// sends nothing; resumed, it continues where it stopped.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { lineRenderer, type AccessRecord, type LineRenderer } from '../../../shared/src/logs/access-record.ts';
import { createDestination } from '../../../shared/src/logs/destinations.ts';
import { DeliveryError, type Batch, type Destination, type DestinationContext, type DrainSpec } from '../../../shared/src/logs/destination.ts';

export interface DrainLimits {
  /** Bound on the characters of rendered records held (queued and in flight). */
  bufferBytes: number;
  batchMaxRecords: number;
  batchMaxBytes: number;
  /** A batch waits at most this long for more records. */
  flushIntervalMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
}

export const MiB = 1024 * 1024;

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

export interface DrainEvents {
  /** A batch was delivered (seconds from its first attempt to the destination's answer). */
  delivered?(drain: Drain, seconds: number, records: number): void;
}

export class Drain {
  readonly id: string;
  private spec: DrainSpec;
  private destination: Destination;
  private render: LineRenderer;
  private readonly limits: DrainLimits;
  private readonly context: DestinationContext;
  private readonly logger: Logger;
  private readonly events: DrainEvents;
  /** Queued records (rendered) not yet in a batch. */
  private lines: string[] = [];
  private times: number[] = [];
  private ids: string[] = [];
  private queuedChars = 0;
  private inflight: Batch | null = null;
  private timer: NodeJS.Timeout | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private failures = 0;
  private closed = false;
  private paused: boolean;
  private pumping = false;
  private readonly idle = new Set<() => void>();
  readonly stats: DrainStats;

  constructor(spec: DrainSpec & { status?: string }, limits: DrainLimits, context: DestinationContext, logger: Logger, events: DrainEvents = {}) {
    this.id = spec.id;
    this.spec = spec;
    this.limits = limits;
    this.context = context;
    this.logger = logger;
    this.events = events;
    this.destination = createDestination(spec, context);
    this.render = lineRenderer(this.destination.lineFormat, spec.fields);
    this.paused = spec.status === 'paused';
    this.stats = {
      status: this.paused ? 'paused' : 'active', lastError: '', recordsShipped: 0, recordsDropped: 0, batchesSent: 0, batchesFailed: 0,
      bufferedBytes: 0, bufferedRecords: 0, lastDeliveredAtMs: 0,
    };
  }

  get destinationType(): DrainSpec['destination_type'] {
    return this.spec.destination_type;
  }

  /** A new configuration of the same drain: the destination and rendering change, the queue stays (records already rendered ship as they are). */
  update(spec: DrainSpec & { status?: string }): void {
    if (JSON.stringify([spec.destination_type, spec.destination_config, spec.log_format, spec.fields])
      !== JSON.stringify([this.spec.destination_type, this.spec.destination_config, this.spec.log_format, this.spec.fields])) {
      this.destination = createDestination(spec, this.context);
      this.render = lineRenderer(this.destination.lineFormat, spec.fields);
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
    const line = this.render(record);
    if (this.queuedChars + (this.inflight?.chars ?? 0) + line.length > this.limits.bufferBytes) {
      this.stats.recordsDropped++;
      if (this.stats.recordsDropped === 1 || this.stats.recordsDropped % 10_000 === 0) {
        this.logger.warn({ drain: this.id, dropped: this.stats.recordsDropped, buffer_bytes: this.limits.bufferBytes }, 'log drain buffer full: records dropped');
      }
      this.stats.lastError = `buffer full (${this.limits.bufferBytes} bytes): ${this.stats.recordsDropped} records dropped`;
      if (!this.paused) this.stats.status = 'error';
      return;
    }
    this.lines.push(line);
    this.times.push(record.timestamp);
    this.ids.push(record.request_id);
    this.queuedChars += line.length;
    if (this.lines.length >= this.limits.batchMaxRecords || this.queuedChars >= this.limits.batchMaxBytes) void this.pump();
    else if (this.timer === null) {
      this.timer = setTimeout(() => {
        this.timer = null;
        void this.pump(true);
      }, this.limits.flushIntervalMs);
      this.timer.unref();
    }
  }

  /** Buffered characters and records (queued and in flight). */
  get buffered(): { bytes: number; records: number } {
    return { bytes: this.queuedChars + (this.inflight?.chars ?? 0), records: this.lines.length + (this.inflight?.lines.length ?? 0) };
  }

  snapshot(): DrainStats {
    const b = this.buffered;
    this.stats.bufferedBytes = b.bytes;
    this.stats.bufferedRecords = b.records;
    return { ...this.stats };
  }

  /** Cuts the next batch from the queue (at most the batch limits). */
  private cut(): Batch {
    const max = this.limits.batchMaxRecords;
    let n = 0;
    let chars = 0;
    while (n < this.lines.length && n < max && (n === 0 || chars + this.lines[n]!.length <= this.limits.batchMaxBytes)) chars += this.lines[n++]!.length;
    const batch: Batch = { id: randomUUID(), lines: this.lines.slice(0, n), times: this.times.slice(0, n), ids: this.ids.slice(0, n), chars };
    if (n === this.lines.length) {
      this.lines = [];
      this.times = [];
      this.ids = [];
    } else {
      this.lines = this.lines.slice(n);
      this.times = this.times.slice(n);
      this.ids = this.ids.slice(n);
    }
    this.queuedChars -= chars;
    return batch;
  }

  /** Sends batches while there is something to send and the drain may (`due`: the flush interval is up, a partial batch goes). */
  private async pump(due = false): Promise<void> {
    if (this.pumping || this.closed) return;
    this.pumping = true;
    try {
      while (!this.closed && !this.paused && this.retryTimer === null) {
        if (this.inflight === null) {
          const full = this.lines.length >= this.limits.batchMaxRecords || this.queuedChars >= this.limits.batchMaxBytes;
          if (this.lines.length === 0 || !(full || due || this.closing)) break;
          this.inflight = this.cut();
        }
        const batch = this.inflight;
        const started = performance.now();
        try {
          await this.destination.send(batch);
        } catch (err) {
          const e = err instanceof DeliveryError ? err : new DeliveryError((err as Error).message, true);
          this.stats.batchesFailed++;
          this.stats.lastError = e.message;
          this.stats.status = this.paused ? 'paused' : 'error';
          if (!e.retryable) {
            // The destination refuses this batch as such: sending it again would fail the same way.
            this.stats.recordsDropped += batch.lines.length;
            this.inflight = null;
            this.logger.warn({ drain: this.id, records: batch.lines.length, err: e.message }, 'log drain batch refused by the destination: dropped');
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
        this.inflight = null;
        if (this.failures > 0) this.logger.info({ drain: this.id, failures: this.failures }, 'log drain delivering again');
        this.failures = 0;
        this.stats.recordsShipped += batch.lines.length;
        this.stats.batchesSent++;
        this.stats.lastDeliveredAtMs = Date.now();
        this.stats.lastError = '';
        this.stats.status = this.paused ? 'paused' : 'active';
        this.events.delivered?.(this, (performance.now() - started) / 1000, batch.lines.length);
      }
    } finally {
      this.pumping = false;
      if (this.lines.length > 0 && this.timer === null && this.retryTimer === null && !this.paused && !this.closed) {
        this.timer = setTimeout(() => {
          this.timer = null;
          void this.pump(true);
        }, this.limits.flushIntervalMs);
        this.timer.unref();
      }
      if (this.inflight === null && this.lines.length === 0) for (const resolve of this.idle) resolve();
    }
  }

  private closing = false;

  /** Sends what is queued now (ignoring the batch timer); resolves when the queue is empty or `timeoutMs` passed. */
  async flush(timeoutMs: number): Promise<void> {
    if (this.paused) return;
    this.closing = true;
    const empty = new Promise<void>((resolve) => {
      if (this.inflight === null && this.lines.length === 0) resolve();
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

  /** Stops for good (the drain was deleted, or the agent stops): queued records are dropped. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.timer = this.retryTimer = null;
    for (const resolve of this.idle) resolve();
  }
}
