// Traffic reports (issue 24 item 4; a feed of the session layer,
// channel-feed.ts): Welcome tells agents how often to send their per-minute
// rollups; each report is checked (every id a UUID, minutes aligned and no
// older than the reports' memory, bounded sizes), buffered with the channel's
// heartbeat-rate writes, handed to the rollup store (cdn-analytics), which
// stores a report once whatever the number of times it arrives, and then
// confirmed to the agent (TrafficReceipt) on the stream it came on: a report
// whose receipt is lost comes again on the next stream and is confirmed again.
import { create } from '@bufbuild/protobuf';
import { ConnectResponseSchema, type ConnectRequest, type TrafficRollup as TrafficRollupMessage } from '../../../shared/gen/edge/v1/control_pb.ts';
import { encodeResponse } from '../../../shared/src/proto/edge-control.ts';
import { RESPONSE_TIME_BUCKETS_MS } from '../../../shared/src/metrics/buckets.ts';
import { topUrlKey, type MinuteRollup, type RollupStore, type TrafficReportInput } from '../cdn-analytics/index.ts';
import { MINUTE } from '../core/clock.ts';
import { UUID, safeNumber, type ChannelContext, type Feed, type WelcomeFields } from './channel-feed.ts';
import type { ChannelMetrics } from './channel-metrics.ts';
import type { AgentStream } from './channel-stream.ts';
import type { ChannelWriter, PartBatch, WriterPart } from './channel-writer.ts';

/** Told to agents in Welcome unless EDGE_TRAFFIC_REPORT_INTERVAL_MS says otherwise. */
export const TRAFFIC_REPORT_INTERVAL_MS = 60_000;
/** Minutes older than this are refused (report ids are remembered a day: an older one could count twice). */
export const MAX_REPORT_AGE_MS = 23 * 60 * MINUTE;
/** Minutes ahead of this control plane's clock accepted (clocks differ a little). */
const MAX_CLOCK_AHEAD_MS = 5 * MINUTE;
const MAX_ROLLUPS = 10_000;
/** Flushes a report may fail to be stored in before it is dropped unconfirmed (its agent sends it again on its next stream). */
const MAX_STORE_ATTEMPTS = 10;
const MAX_SLICES = 1_000;
const MAX_URLS = 500;
const MAX_URL_LENGTH = 2_048;
const HISTOGRAM = RESPONSE_TIME_BUCKETS_MS.length + 1;
const COUNTRY = /^[A-Z]{2}$/;

const n = (v: bigint) => safeNumber(v) ?? Number.MAX_SAFE_INTEGER;
const statuses = (m: Record<string, bigint>) => ({
  hit: n(m.HIT ?? 0n), miss: n(m.MISS ?? 0n), expired: n(m.EXPIRED ?? 0n), stale: n(m.STALE ?? 0n), bypass: n(m.BYPASS ?? 0n),
  revalidated: n(m.REVALIDATED ?? 0n), updating: n(m.UPDATING ?? 0n),
});
const id = (text: string) => (text === '' ? '' : UUID.test(text) ? text.toLowerCase() : null);

/** A rollup as the store takes it, or null when it cannot be one (the report's other rollups still count). */
export function rollupOf(r: TrafficRollupMessage, nowMs: number): MinuteRollup | null {
  const minute = safeNumber(r.minuteStartMs < 0n ? 0n : r.minuteStartMs);
  if (minute === null || minute % MINUTE !== 0 || minute < nowMs - MAX_REPORT_AGE_MS || minute > nowMs + MAX_CLOCK_AHEAD_MS) return null;
  if (!UUID.test(r.endpointId)) return null;
  const slices = [];
  for (const s of r.slices.slice(0, MAX_SLICES)) {
    const origin = id(s.originId);
    const rule = id(s.cacheRuleId);
    if (origin === null || rule === null) continue;
    const rt = Array.from({ length: HISTOGRAM }, (_, i) => n(s.responseTimeBuckets[i] ?? 0n));
    slices.push({
      origin_id: origin, cache_rule_id: rule, requests: n(s.requests), s2xx: n(s.status2xx), s3xx: n(s.status3xx), s4xx: n(s.status4xx), s5xx: n(s.status5xx),
      statuses: statuses(s.cacheStatuses), bytes_from_cache: n(s.bytesFromCache), bytes_from_origin: n(s.bytesFromOrigin), rt,
      rt_sum_ms: Number.isFinite(s.responseTimeSumMs) && s.responseTimeSumMs >= 0 ? s.responseTimeSumMs : 0,
    });
  }
  const urls = r.topUrls.slice(0, MAX_URLS).filter((u) => u.url.startsWith('/') && u.url.length <= MAX_URL_LENGTH && !/[\u0000-\u001f\u007f]/.test(u.url))
    .map((u) => ({ url: topUrlKey(u.url, u.scheme), requests: n(u.requests), bytes: n(u.bytes), cache_hits: n(u.cacheHits), statuses: statuses(u.cacheStatuses) }));
  const countries = r.countries.filter((c) => COUNTRY.test(c.countryCode)).slice(0, 300)
    .map((c) => ({ country: c.countryCode, requests: n(c.requests), bytes: n(c.bytes), errors: n(c.errors) }));
  return { minute, endpoint_id: r.endpointId.toLowerCase(), slices, urls, countries };
}

/** Reports buffered until the heartbeat-rate flush, then stored and confirmed. */
class ReportBuffer implements WriterPart {
  readonly #writer: ChannelWriter;
  readonly #metrics: ChannelMetrics;
  readonly #store: () => RollupStore | undefined;
  readonly #log: ChannelContext['log'];
  #reports: { report: TrafficReportInput; stream: AgentStream; attempts: number }[] = [];

  constructor(context: ChannelContext, store: () => RollupStore | undefined) {
    this.#writer = context.writer;
    this.#log = context.log;
    this.#metrics = context.metrics;
    this.#store = store;
    context.writer.add(this);
  }

  get urgent(): boolean {
    return false;
  }

  get routine(): boolean {
    return this.#reports.length > 0;
  }

  add(report: TrafficReportInput, stream: AgentStream): void {
    this.#reports.push({ report, stream, attempts: 0 });
    this.#writer.later();
  }

  take(routine: boolean): PartBatch | null {
    const store = this.#store();
    if (!routine || !this.#reports.length || !store) return null;
    const taken = this.#reports;
    this.#reports = [];
    return {
      // Never throws: a failure here would make the channel's flush write the other feeds' batches again. The
      // reports wait for the next flush (MAX_STORE_ATTEMPTS at most, then dropped unconfirmed: the agents send
      // them again on their next stream).
      write: async (em, now) => {
        let result: Awaited<ReturnType<RollupStore['ingest']>>;
        try {
          result = await store.ingest(em, taken.map((t) => t.report), now);
        } catch (error) {
          const kept = taken.filter((t) => ++t.attempts < MAX_STORE_ATTEMPTS);
          this.#log.error({ err: error, reports: taken.length, dropped: taken.length - kept.length }, 'edge channel: storing traffic reports failed');
          this.#reports = [...kept, ...this.#reports];
          if (kept.length) this.#writer.later();
          return;
        }
        this.#metrics.reports(result.fresh, taken.length - result.fresh, result.rollups);
        const stored = new Set(result.confirmed);
        const byStream = new Map<AgentStream, string[]>();
        for (const t of taken) {
          if (!stored.has(t.report.report_id)) continue;
          let ids = byStream.get(t.stream);
          if (!ids) byStream.set(t.stream, (ids = []));
          ids.push(t.report.report_id);
        }
        for (const [stream, reportIds] of byStream) {
          stream.write(encodeResponse(create(ConnectResponseSchema, { message: { case: 'trafficReceipt', value: { reportIds } } })));
        }
      },
      putBack: () => {
        // Another part's write failed after this one stored the reports: storing them again adds nothing (ids).
        this.#reports = [...taken, ...this.#reports];
        this.#writer.later();
      },
    };
  }
}

export class TrafficFeed implements Feed<undefined> {
  readonly name = 'traffic reports';
  readonly messages = ['trafficReport'] as const;
  readonly #context: ChannelContext;
  readonly #intervalMs: number;
  readonly #reports: ReportBuffer;

  constructor(context: ChannelContext, store: () => RollupStore | undefined, intervalMs = TRAFFIC_REPORT_INTERVAL_MS) {
    this.#context = context;
    this.#intervalMs = intervalMs;
    this.#reports = new ReportBuffer(context, store);
  }

  attach(): undefined {
    return undefined;
  }

  welcome(): WelcomeFields {
    return { trafficReportIntervalMs: this.#intervalMs };
  }

  onMessage(stream: AgentStream, _state: undefined, message: ConnectRequest['message']): void {
    if (message.case !== 'trafficReport') return;
    const report = message.value;
    // Agents before report ids send none: such a report cannot be told from a copy of itself, and is not stored.
    if (!UUID.test(report.reportId)) return;
    const now = this.#context.clock.now().getTime();
    const rollups = report.rollups.slice(0, MAX_ROLLUPS).flatMap((r) => rollupOf(r, now) ?? []);
    this.#reports.add({ report_id: report.reportId.toLowerCase(), node_id: stream.nodeId, rollups }, stream);
  }
}
