// What an agent with workers reports as one node: the workers' traffic
// rollups summed per endpoint and minute (the control plane sees one rollup
// per endpoint and minute, as from a single process), and each log drain's
// delivery state summed over the workers that ship its records.
import type { DrainState } from '../logs/drains.ts';
import type { SliceRollup, TrafficRollup } from '../metrics/traffic.ts';

type Classes = TrafficRollup['statusClasses'];

const addClasses = (a: Classes, b: Classes): Classes => ({
  '1xx': a['1xx'] + b['1xx'], '2xx': a['2xx'] + b['2xx'], '3xx': a['3xx'] + b['3xx'], '4xx': a['4xx'] + b['4xx'], '5xx': a['5xx'] + b['5xx'],
});

function addCounts(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out = { ...a };
  for (const k in b) out[k] = (out[k] ?? 0) + b[k]!;
  return out;
}

const addBuckets = (a: number[], b: number[]) => a.map((x, i) => x + (b[i] ?? 0));

function mergeSlices(a: SliceRollup[], b: SliceRollup[]): SliceRollup[] {
  const byKey = new Map(a.map((s) => [`${s.originId}|${s.cacheRuleId}`, s]));
  for (const s of b) {
    const key = `${s.originId}|${s.cacheRuleId}`;
    const x = byKey.get(key);
    byKey.set(key, x === undefined ? s : {
      ...x, requests: x.requests + s.requests, statusClasses: addClasses(x.statusClasses, s.statusClasses), cacheStatuses: addCounts(x.cacheStatuses, s.cacheStatuses),
      bytesFromCache: x.bytesFromCache + s.bytesFromCache, bytesFromOrigin: x.bytesFromOrigin + s.bytesFromOrigin,
      responseTimeBuckets: addBuckets(x.responseTimeBuckets, s.responseTimeBuckets), responseTimeSumMs: x.responseTimeSumMs + s.responseTimeSumMs,
    });
  }
  return [...byKey.values()];
}

function mergeOne(a: TrafficRollup, b: TrafficRollup): TrafficRollup {
  // The same path over HTTP and over HTTPS are two URLs.
  const urls = new Map(a.topUrls.map((u) => [`${u.scheme}:${u.url}`, u]));
  for (const u of b.topUrls) {
    const key = `${u.scheme}:${u.url}`;
    const x = urls.get(key);
    urls.set(key, x === undefined ? u : {
      url: u.url, scheme: u.scheme, requests: x.requests + u.requests, bytes: x.bytes + u.bytes, cacheHits: x.cacheHits + u.cacheHits, cacheStatuses: addCounts(x.cacheStatuses, u.cacheStatuses),
    });
  }
  const countries = new Map(a.countries.map((c) => [c.countryCode, c]));
  for (const c of b.countries) {
    const x = countries.get(c.countryCode);
    countries.set(c.countryCode, x === undefined ? c : { countryCode: c.countryCode, requests: x.requests + c.requests, bytes: x.bytes + c.bytes, errors: x.errors + c.errors });
  }
  return {
    minuteStartMs: a.minuteStartMs,
    endpointId: a.endpointId,
    requests: a.requests + b.requests,
    statusClasses: addClasses(a.statusClasses, b.statusClasses),
    cacheStatuses: addCounts(a.cacheStatuses, b.cacheStatuses),
    bytesFromCache: a.bytesFromCache + b.bytesFromCache,
    bytesFromOrigin: a.bytesFromOrigin + b.bytesFromOrigin,
    responseTimeBuckets: addBuckets(a.responseTimeBuckets, b.responseTimeBuckets),
    responseTimeSumMs: a.responseTimeSumMs + b.responseTimeSumMs,
    topUrls: [...urls.values()],
    cacheRuleRequests: addCounts(a.cacheRuleRequests, b.cacheRuleRequests),
    cacheRuleHits: addCounts(a.cacheRuleHits, b.cacheRuleHits),
    slices: mergeSlices(a.slices, b.slices),
    countries: [...countries.values()],
  };
}

/** Accumulates rollups as workers send them; take() gives one per endpoint and minute, top URLs cut to topN. */
export class RollupAccumulator {
  private byKey = new Map<string, TrafficRollup>();

  add(rollups: readonly TrafficRollup[]): void {
    for (const r of rollups) {
      const key = `${r.minuteStartMs}|${r.endpointId}`;
      const x = this.byKey.get(key);
      this.byKey.set(key, x === undefined ? r : mergeOne(x, r));
    }
  }

  take(topN: number): TrafficRollup[] {
    const out = [...this.byKey.values()].map((r) => ({ ...r, topUrls: [...r.topUrls].sort((x, y) => y.requests - x.requests).slice(0, topN) }));
    this.byKey = new Map();
    return out.sort((x, y) => x.minuteStartMs - y.minuteStartMs || (x.endpointId < y.endpointId ? -1 : 1));
  }
}

const SEVERITY: Record<DrainState['status'], number> = { active: 0, paused: 1, error: 2 };

/** One state per drain: counters and buffers summed, the worst status with its error, the latest delivery. */
export function mergeDrainStates(perWorker: readonly (readonly DrainState[])[]): DrainState[] {
  const byId = new Map<string, DrainState>();
  for (const states of perWorker) {
    for (const s of states) {
      const x = byId.get(s.drainId);
      if (x === undefined) {
        byId.set(s.drainId, { ...s });
        continue;
      }
      const worse = SEVERITY[s.status] > SEVERITY[x.status];
      byId.set(s.drainId, {
        drainId: s.drainId,
        status: worse ? s.status : x.status,
        lastError: worse ? s.lastError : x.lastError || s.lastError,
        recordsShipped: x.recordsShipped + s.recordsShipped,
        recordsDropped: x.recordsDropped + s.recordsDropped,
        batchesSent: x.batchesSent + s.batchesSent,
        batchesFailed: x.batchesFailed + s.batchesFailed,
        bufferedBytes: x.bufferedBytes + s.bufferedBytes,
        bufferedRecords: x.bufferedRecords + s.bufferedRecords,
        lastDeliveredAtMs: Math.max(x.lastDeliveredAtMs, s.lastDeliveredAtMs),
      });
    }
  }
  return [...byId.values()];
}
