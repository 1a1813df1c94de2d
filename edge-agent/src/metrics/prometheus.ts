// Prometheus metrics of the agent. Request counters and the request latency
// histogram are read from TrafficCounters at scrape time (nothing on the hot
// path touches prom-client); origin latency is observed directly (only misses).
import client from 'prom-client';
import { RESPONSE_TIME_BUCKETS_MS } from '../../../shared/src/metrics/buckets.ts';
import { collectDefaultMetrics } from '../../../shared/src/metrics/default-metrics.ts';
import { CACHE_STATUSES, type TrafficCounters } from './traffic.ts';

export interface MetricsSources {
  traffic: TrafficCounters;
  cache: () => { objects: number; memoryBytes: number; diskBytes: number };
  /** What each cache tier did since this process started (counters, summed over the node's processes). */
  cacheActivity: () => CacheActivity;
  configVersion: () => number;
  purgeSequence: () => number;
  originHealth: () => { originId: string; consecutiveFailures: number; healthy: boolean }[];
  /** Whether the agent is cut off from the control plane (no stream for 3 heartbeat intervals). */
  cutOff: () => boolean;
  /** When the default certificate (TLS_CERT_FILE) expires, in ms since the epoch; null without one. */
  defaultCertificateExpiry: () => number | null;
}

export interface TierActivity {
  lookups: number;
  hits: number;
  fills: number;
  fillBytes: number;
  evictions: number;
}

export interface CacheActivity {
  memory: TierActivity;
  /** null without a node tier. */
  node: TierActivity | null;
  /** Slices of large objects fetched from the origin. */
  sliceFills: number;
  /** The node fill lock's answers: follow is a wait for another worker's fill, alone one that timed out. */
  fillTurns: { lead: number; follow: number; alone: number };
}

/** A counter read from the process's own figures at scrape time (summed over a node's processes). */
function counterFrom(registry: client.Registry, name: string, help: string, values: () => { labels: Record<string, string>; value: number }[]): void {
  registry.registerMetric({
    name,
    get: async () => ({ name, help, type: 'counter', values: values().map((v) => ({ ...v, metricName: name })), aggregator: 'sum' }),
  } as unknown as client.Metric);
}

export interface AgentMetrics {
  registry: client.Registry;
  originLatency: client.Histogram<'origin' | 'status_class'>;
  policyDenials: client.Counter<'endpoint' | 'policy' | 'reason'>;
  /** TLS handshakes that failed on the HTTPS listener, by reason (protocol_version, no_shared_cipher, unknown_name...). */
  tlsHandshakeFailures: client.Counter<'reason'>;
}

const STATUS_CLASS = ['', '1xx', '2xx', '3xx', '4xx', '5xx'];

export function createMetrics(sources: MetricsSources): AgentMetrics {
  const registry = new client.Registry();
  collectDefaultMetrics(registry, 'edge_agent_');

  registry.registerMetric({
    name: 'edge_requests_total',
    help: 'Viewer requests by endpoint, status class and cache status',
    type: 'counter',
    get: async () => {
      const values: { labels: Record<string, string>; value: number; metricName: string }[] = [];
      for (const [endpoint, c] of sources.traffic.totals) {
        for (let cls = 1; cls <= 5; cls++) {
          if (c.statusClasses[cls] > 0) values.push({ metricName: 'edge_requests_total', labels: { endpoint, status_class: STATUS_CLASS[cls] }, value: c.statusClasses[cls] });
        }
      }
      return { name: 'edge_requests_total', help: 'Viewer requests by endpoint and status class', type: 'counter', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  registry.registerMetric({
    name: 'edge_cache_requests_total',
    get: async () => {
      const values: { labels: Record<string, string>; value: number; metricName: string }[] = [];
      for (const [endpoint, c] of sources.traffic.totals) {
        for (let i = 0; i < CACHE_STATUSES.length; i++) {
          if (c.cacheStatuses[i] > 0) values.push({ metricName: 'edge_cache_requests_total', labels: { endpoint, cache_status: CACHE_STATUSES[i] }, value: c.cacheStatuses[i] });
        }
      }
      return { name: 'edge_cache_requests_total', help: 'Viewer requests by endpoint and cache status', type: 'counter', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  registry.registerMetric({
    name: 'edge_bytes_served_total',
    get: async () => {
      const values: { labels: Record<string, string>; value: number; metricName: string }[] = [];
      for (const [endpoint, c] of sources.traffic.totals) {
        values.push({ metricName: 'edge_bytes_served_total', labels: { endpoint, source: 'cache' }, value: c.bytesFromCache });
        values.push({ metricName: 'edge_bytes_served_total', labels: { endpoint, source: 'origin' }, value: c.bytesFromOrigin });
      }
      return { name: 'edge_bytes_served_total', help: 'Response body bytes served, from cache or from origin', type: 'counter', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  registry.registerMetric({
    name: 'edge_request_duration_seconds',
    get: async () => {
      const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = [];
      for (const [endpoint, c] of sources.traffic.totals) {
        let cumulative = 0;
        for (let i = 0; i < RESPONSE_TIME_BUCKETS_MS.length; i++) {
          cumulative += c.buckets[i];
          values.push({ metricName: 'edge_request_duration_seconds_bucket', labels: { endpoint, le: RESPONSE_TIME_BUCKETS_MS[i] / 1000 }, value: cumulative });
        }
        cumulative += c.buckets[RESPONSE_TIME_BUCKETS_MS.length];
        values.push({ metricName: 'edge_request_duration_seconds_bucket', labels: { endpoint, le: '+Inf' }, value: cumulative });
        values.push({ metricName: 'edge_request_duration_seconds_sum', labels: { endpoint }, value: c.responseTimeSumMs / 1000 });
        values.push({ metricName: 'edge_request_duration_seconds_count', labels: { endpoint }, value: c.requests });
      }
      return { name: 'edge_request_duration_seconds', help: 'Time to answer a viewer request (until the response is handed to the socket)', type: 'histogram', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  registry.registerMetric({
    name: 'edge_shield_requests_total',
    get: async () => {
      const values: { labels: Record<string, string>; value: number; metricName: string }[] = [];
      for (const [endpoint, c] of sources.traffic.shieldHops) {
        for (let i = CACHE_STATUSES.length; i < c.requests.length; i++) {
          const cls = Math.floor(i / CACHE_STATUSES.length);
          const status = CACHE_STATUSES[i % CACHE_STATUSES.length]!;
          if (c.requests[i] > 0) values.push({ metricName: 'edge_shield_requests_total', labels: { endpoint, status_class: STATUS_CLASS[cls], cache_status: status }, value: c.requests[i] });
        }
      }
      return { name: 'edge_shield_requests_total', help: 'Shield hops answered (other agents fetching through this shield), by endpoint, status class and cache status; never counted as viewer requests', type: 'counter', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  registry.registerMetric({
    name: 'edge_shield_bytes_total',
    get: async () => {
      const values = [...sources.traffic.shieldHops].map(([endpoint, c]) => ({ metricName: 'edge_shield_bytes_total', labels: { endpoint }, value: c.bytes }));
      return { name: 'edge_shield_bytes_total', help: 'Response body bytes sent to other agents\' shield hops; never counted as bytes served to viewers', type: 'counter', values, aggregator: 'sum' };
    },
  } as unknown as client.Metric);

  const originLatency = new client.Histogram({
    name: 'edge_origin_request_duration_seconds',
    help: 'Origin fetch time to response headers',
    labelNames: ['origin', 'status_class'] as const,
    buckets: RESPONSE_TIME_BUCKETS_MS.map((ms) => ms / 1000),
    registers: [registry],
  });

  // Counted only when a request policy refuses (never on the allowed path); the viewer sees one 403 whatever the reason.
  const policyDenials = new client.Counter({
    name: 'edge_policy_denials_total',
    help: 'Viewer requests refused by a request policy, by endpoint, policy (ip_rule, geo, signed_url) and reason',
    labelNames: ['endpoint', 'policy', 'reason'] as const,
    registers: [registry],
  });

  const tiers = () => {
    const a = sources.cacheActivity();
    return a.node === null ? [['memory', a.memory] as const] : [['memory', a.memory] as const, ['node', a.node] as const];
  };
  counterFrom(registry, 'edge_cache_tier_lookups_total', 'Cache lookups by tier (memory: the worker\'s; node: shared by the node\'s workers, asked after a memory miss) and result',
    () => tiers().flatMap(([tier, t]) => [{ labels: { tier, result: 'hit' }, value: t.hits }, { labels: { tier, result: 'miss' }, value: t.lookups - t.hits }]));
  counterFrom(registry, 'edge_cache_tier_fills_total', 'Objects and slices stored, by tier', () => tiers().map(([tier, t]) => ({ labels: { tier }, value: t.fills })));
  counterFrom(registry, 'edge_cache_tier_fill_bytes_total', 'Body bytes stored, by tier', () => tiers().map(([tier, t]) => ({ labels: { tier }, value: t.fillBytes })));
  counterFrom(registry, 'edge_cache_tier_evictions_total', 'Entries removed to stay within a tier\'s size bound, by tier', () => tiers().map(([tier, t]) => ({ labels: { tier }, value: t.evictions })));
  counterFrom(registry, 'edge_cache_slice_fills_total', 'Slices of large objects fetched from the origin (or read from its whole answer)', () => [{ labels: {}, value: sources.cacheActivity().sliceFills }]);
  counterFrom(registry, 'edge_cache_node_fill_turns_total', 'Answers of the node\'s fill lock: lead (this worker fills), follow (waited for another worker\'s fill), alone (no answer in time)',
    () => Object.entries(sources.cacheActivity().fillTurns).map(([turn, value]) => ({ labels: { turn }, value })));

  new client.Gauge({
    name: 'edge_cache_objects',
    help: 'Objects held in the cache (all tiers)',
    registers: [registry],
    collect() {
      this.set(sources.cache().objects);
    },
  });
  new client.Gauge({
    name: 'edge_cache_bytes',
    help: 'Bytes held in the cache by tier',
    labelNames: ['tier'] as const,
    registers: [registry],
    collect() {
      const c = sources.cache();
      this.set({ tier: 'memory' }, c.memoryBytes);
      this.set({ tier: 'node' }, c.diskBytes);
    },
  });
  new client.Gauge({
    name: 'edge_config_version',
    help: 'Version of the configuration snapshot being served',
    registers: [registry],
    // One value per agent whatever its workers (they all serve the same version).
    aggregator: 'max',
    collect() {
      this.set(sources.configVersion());
    },
  });
  new client.Gauge({
    name: 'edge_purge_sequence',
    help: 'Highest purge sequence applied',
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.set(sources.purgeSequence());
    },
  });
  new client.Gauge({
    name: 'edge_origin_consecutive_failures',
    help: 'Consecutive failed health probes per origin',
    labelNames: ['origin'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const o of sources.originHealth()) this.set({ origin: o.originId }, o.consecutiveFailures);
    },
  });
  new client.Gauge({
    name: 'edge_origin_up',
    help: '1 when the origin passed its last health probe',
    labelNames: ['origin'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const o of sources.originHealth()) this.set({ origin: o.originId }, o.healthy ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'edge_control_plane_cut_off',
    help: '1 while the agent is cut off from the control plane (no stream for 3 heartbeat intervals): purges made meanwhile cannot reach it',
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.set(sources.cutOff() ? 1 : 0);
    },
  });
  new client.Gauge({
    name: 'edge_tls_default_certificate_expiry_timestamp_seconds',
    help: 'Unix time at which the default certificate (TLS_CERT_FILE) expires; absent without one',
    registers: [registry],
    aggregator: 'min',
    collect() {
      this.reset();
      const expiry = sources.defaultCertificateExpiry();
      if (expiry !== null) this.set(Math.floor(expiry / 1000));
    },
  });
  const tlsHandshakeFailures = new client.Counter({
    name: 'edge_tls_handshake_failures_total',
    help: 'TLS handshakes that failed on the HTTPS listener, by reason',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  return { registry, originLatency, policyDenials, tlsHandshakeFailures };
}
