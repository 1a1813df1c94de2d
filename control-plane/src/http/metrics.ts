// Prometheus metrics of the control plane's HTTP API. The request histogram is
// kept in plain typed arrays per (method, route, status) and read by the
// registry at scrape time, so a request costs one Map lookup and three
// additions (prom-client's own observe hashes and validates the labels on
// every call). The buckets are the edge agent's (shared/src/metrics/buckets.ts).
import { Registry, type Metric } from 'prom-client';
import { RESPONSE_TIME_BUCKETS_MS, responseTimeBucket } from '../../../shared/src/metrics/buckets.ts';
import { collectDefaultMetrics } from '../../../shared/src/metrics/default-metrics.ts';

export interface HttpMetrics {
  registry: Registry;
  /** Counts one request by method, matched route pattern and status. */
  observe(method: string, route: string, status: number, seconds: number): void;
}

interface Series {
  labels: { method: string; route: string; status: string };
  /** Per-bucket counts (not cumulative); the last one is +Inf. */
  buckets: Float64Array;
  sum: number;
  count: number;
}

const NAME = 'http_request_duration_seconds';

export function createHttpMetrics(): HttpMetrics {
  // A registry per app, so tests that start several apps in one process don't collide.
  const registry = new Registry();
  collectDefaultMetrics(registry);
  // route pattern → (status × 64 + method; node:http knows fewer than 64 methods) → series: the route strings are the declarations' own,
  // so each lookup hashes nothing new and builds no key string.
  const series = new Map<string, Map<number, Series>>();
  const methods = new Map<string, number>();

  registry.registerMetric({
    name: NAME,
    get: async () => {
      const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
      for (const byRoute of series.values()) for (const s of byRoute.values()) {
        let cumulative = 0;
        for (let i = 0; i < RESPONSE_TIME_BUCKETS_MS.length; i++) {
          cumulative += s.buckets[i]!;
          values.push({ metricName: `${NAME}_bucket`, labels: { ...s.labels, le: RESPONSE_TIME_BUCKETS_MS[i]! / 1000 }, value: cumulative });
        }
        values.push({ metricName: `${NAME}_bucket`, labels: { ...s.labels, le: '+Inf' }, value: s.count });
        values.push({ metricName: `${NAME}_sum`, labels: s.labels, value: s.sum });
        values.push({ metricName: `${NAME}_count`, labels: s.labels, value: s.count });
      }
      return { name: NAME, help: 'HTTP request duration by matched route and status', type: 'histogram', values, aggregator: 'sum' };
    },
  } as unknown as Metric);

  return {
    registry,
    observe(method, route, status, seconds) {
      let byRoute = series.get(route);
      if (!byRoute) series.set(route, (byRoute = new Map()));
      let m = methods.get(method);
      if (m === undefined) methods.set(method, (m = methods.size));
      const key = status * 64 + m;
      let s = byRoute.get(key);
      if (!s) {
        s = { labels: { method, route, status: String(status) }, buckets: new Float64Array(RESPONSE_TIME_BUCKETS_MS.length + 1), sum: 0, count: 0 };
        byRoute.set(key, s);
      }
      s.buckets[responseTimeBucket(seconds * 1000)]!++;
      s.sum += seconds;
      s.count++;
    },
  };
}
