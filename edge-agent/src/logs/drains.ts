// The log drains of the configuration in force (issue 24 item 2): one Drain
// per snapshot entry, kept across configurations (a changed entry changes
// its destination, its queue stays; a removed one stops and drops its
// queue), and the lookup the exit makes per answer: the drains of an
// endpoint are those naming it plus those naming none (every endpoint).
// Their state goes to the control plane in every heartbeat, and to
// Prometheus at scrape time.
import type { Logger } from 'pino';
import client from 'prom-client';
import type { LogDrainSnapshot } from '../../../shared/src/config/snapshot.ts';
import type { AccessRecord } from '../../../shared/src/logs/access-record.ts';
import type { DrainSpec } from '../../../shared/src/logs/destination.ts';
import { BufferBudget } from './buffer-budget.ts';
import { defaultLimits, Drain, MiB, type DrainLimits, type DrainStats } from './drain.ts';

/** What the drains of an endpoint read beyond the record's cheap fields (the exit leaves the rest empty). */
export interface RecordNeeds {
  requestId: boolean;
  headers: boolean;
}

const ALL_NEEDS: RecordNeeds = { requestId: true, headers: true };

export interface LogDrainsOptions {
  /** The node's name (object keys, Datadog's hostname, the edge_node field). */
  nodeName: string;
  logger: Logger;
  /** The memory all the drains of this worker share for their records (LOG_DRAIN_BUFFER_BYTES). */
  bufferBytes?: number;
  /** Overrides every destination's batch interval (LOG_DRAIN_FLUSH_INTERVAL_MS). */
  flushIntervalMs?: number;
  /** Overrides the longest wait between retries (LOG_DRAIN_RETRY_MAX_MS). */
  retryMaxMs?: number;
  /** Bound on each delivery request. */
  timeoutMs?: number;
}

export const DEFAULT_DRAIN_BUFFER_BYTES = 64 * MiB;

export interface DrainState extends DrainStats {
  drainId: string;
}

const NONE: readonly Drain[] = [];

/** Whether a drain reads the request id (its fields, or a destination keyed by it) and the request's headers. */
function needsOf(drains: readonly Drain[]): RecordNeeds {
  return {
    requestId: drains.some((d) => d.needsRequestId),
    headers: drains.some((d) => d.readsField('user_agent') || d.readsField('referer')),
  };
}

export class LogDrains {
  private readonly options: LogDrainsOptions;
  private readonly drains = new Map<string, Drain>();
  private every: readonly Drain[] = NONE;
  private byEndpoint = new Map<string, readonly Drain[]>();
  /** What each list of drains reads (keyed by the list itself). */
  private needs = new Map<readonly Drain[], RecordNeeds>();
  private latency: client.Histogram<'drain'> | null = null;
  /** One budget for every drain's records (and batches in flight): what they hold together stays within it. */
  readonly budget: BufferBudget;

  constructor(options: LogDrainsOptions) {
    this.options = options;
    this.budget = new BufferBudget(options.bufferBytes ?? DEFAULT_DRAIN_BUFFER_BYTES);
  }

  get nodeName(): string {
    return this.options.nodeName;
  }

  /** The drains that receive an endpoint's records (hot path: one map lookup). */
  forEndpoint(endpointId: string): readonly Drain[] {
    return this.byEndpoint.get(endpointId) ?? this.every;
  }

  /** What the record for these drains (a list forEndpoint gave) must carry. */
  needsFor(drains: readonly Drain[]): RecordNeeds {
    return this.needs.get(drains) ?? ALL_NEEDS;
  }

  /** Hands a record to each drain of its endpoint. */
  record(record: AccessRecord, drains: readonly Drain[]): void {
    for (let i = 0; i < drains.length; i++) drains[i]!.push(record);
  }

  get size(): number {
    return this.drains.size;
  }

  get(id: string): Drain | undefined {
    return this.drains.get(id);
  }

  private limits(type: DrainSpec['destination_type']): DrainLimits {
    const limits = defaultLimits(type, this.options.bufferBytes ?? DEFAULT_DRAIN_BUFFER_BYTES, this.options.flushIntervalMs);
    if (this.options.retryMaxMs !== undefined) limits.retryMaxMs = this.options.retryMaxMs;
    return limits;
  }

  /** Takes the drains of a new configuration. Throws nothing: a drain whose client cannot be made is left out and logged. */
  apply(entries: readonly LogDrainSnapshot[]): void {
    const seen = new Set<string>();
    const every: Drain[] = [];
    const named = new Map<string, Drain[]>();
    for (const entry of entries) {
      const spec = entry as unknown as DrainSpec & { status: string };
      let drain = this.drains.get(entry.id);
      try {
        if (drain && drain.destinationType === entry.destination_type) drain.update(spec);
        else {
          drain?.close();
          drain = new Drain(spec, this.limits(entry.destination_type), { nodeName: this.options.nodeName, timeoutMs: this.options.timeoutMs }, this.options.logger, {
            delivered: (d, seconds) => this.latency?.observe({ drain: d.id }, seconds),
          }, this.budget);
          this.drains.set(entry.id, drain);
        }
      } catch (err) {
        this.options.logger.error({ drain: entry.id, err: (err as Error).message }, 'log drain not started');
        continue;
      }
      seen.add(entry.id);
      if (entry.endpoint_ids.length === 0) every.push(drain);
      else for (const id of entry.endpoint_ids) {
        let list = named.get(id);
        if (!list) named.set(id, (list = []));
        list.push(drain);
      }
    }
    for (const [id, drain] of this.drains) {
      if (seen.has(id)) continue;
      drain.close();
      this.drains.delete(id);
    }
    const byEndpoint = new Map<string, readonly Drain[]>();
    for (const [id, list] of named) byEndpoint.set(id, [...list, ...every]);
    this.byEndpoint = byEndpoint;
    this.every = every.length ? every : NONE;
    const needs = new Map<readonly Drain[], RecordNeeds>([[this.every, needsOf(this.every)]]);
    for (const list of byEndpoint.values()) needs.set(list, needsOf(list));
    this.needs = needs;
  }

  /** Every drain's state (heartbeats, /metrics). */
  states(): DrainState[] {
    return [...this.drains.values()].map((d) => ({ drainId: d.id, ...d.snapshot() }));
  }

  /** Sends what every drain holds, waiting at most `timeoutMs` (shutdown). */
  async flush(timeoutMs: number): Promise<void> {
    await Promise.all([...this.drains.values()].map((d) => d.flush(timeoutMs)));
  }

  close(): void {
    for (const drain of this.drains.values()) drain.close();
    this.drains.clear();
    this.byEndpoint = new Map();
    this.every = NONE;
  }

  /** Registers the drains' metrics (queue depth, records shipped and dropped, batches, delivery latency) on the agent's registry. */
  registerMetrics(registry: client.Registry): void {
    const gauge = (name: string, help: string, value: (s: DrainState) => number) => new client.Gauge({
      name, help, labelNames: ['drain'] as const, registers: [registry],
      collect() {
        this.reset();
        for (const s of drains.states()) this.set({ drain: s.drainId }, value(s));
      },
    });
    const counter = (name: string, help: string, values: (s: DrainState) => [Record<string, string>, number][]) => {
      registry.registerMetric({
        name,
        get: async () => ({
          name, help, type: 'counter', aggregator: 'sum',
          values: drains.states().flatMap((s) => values(s).map(([l, value]) => ({ metricName: name, labels: { drain: s.drainId, ...l }, value }))),
        }),
      } as unknown as client.Metric);
    };
    const drains = this;
    gauge('edge_log_drain_queue_records', 'Records a log drain holds (queued and in flight)', (s) => s.bufferedRecords);
    gauge('edge_log_drain_queue_bytes', 'Bytes of rendered records a log drain holds (queued and in flight)', (s) => s.bufferedBytes);
    for (const [name, help, value] of [
      ['edge_log_drain_buffer_bytes', 'Bytes the log drains hold in memory together (records queued and in flight, buffers kept for reuse), within LOG_DRAIN_BUFFER_BYTES per worker', () => drains.budget.heldBytes],
      ['edge_log_drain_buffer_limit_bytes', 'The memory the log drains may hold together (LOG_DRAIN_BUFFER_BYTES per worker)', () => drains.budget.bytes],
    ] as const) {
      new client.Gauge({ name, help, registers: [registry], collect() { this.set(value()); } });
    }
    gauge('edge_log_drain_up', '1 when the drain\'s last delivery succeeded (or none failed yet), 0 in error, -1 paused', (s) => (s.status === 'active' ? 1 : s.status === 'error' ? 0 : -1));
    counter('edge_log_drain_records_shipped_total', 'Records a log drain delivered', (s) => [[{}, s.recordsShipped]]);
    counter('edge_log_drain_records_dropped_total', 'Records a log drain dropped (buffer full, or a batch the destination refused)', (s) => [[{}, s.recordsDropped]]);
    counter('edge_log_drain_batches_total', 'Batches a log drain sent, by outcome (sent, failed: a failed attempt is retried)',
      (s) => [[{ outcome: 'sent' }, s.batchesSent], [{ outcome: 'failed' }, s.batchesFailed]]);
    this.latency = new client.Histogram({
      name: 'edge_log_drain_delivery_seconds',
      help: 'Time a log drain took to deliver a batch (its last attempt)',
      labelNames: ['drain'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    });
  }
}
