// prom-client's default process and Node.js metrics, less the three gauges it
// names with a counter's `_total` suffix (nodejs_active_handles_total,
// nodejs_active_requests_total, nodejs_active_resources_total), which
// `promtool check metrics` rejects; their per-type gauges (nodejs_active_handles
// etc.) stay and add up to the same numbers.
//
// The event-loop lag histogram samples every EVENT_LOOP_SAMPLE_MS rather than
// prom-client's 10 ms: its timer woke an idle process about 200 times a second
// (each wake a system call and a turn of the loop: on a slow host 10–14 ms of
// CPU a second, idle, for the control plane), and that cost was charged to
// every purge and every cache hit. A lag of interest (tens of milliseconds and
// more) is still seen by every sample it delays.
import client from 'prom-client';

/** How often the event-loop lag is sampled (prom-client's eventLoopMonitoringPrecision). */
export const EVENT_LOOP_SAMPLE_MS = 100;

const MISNAMED = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export function collectDefaultMetrics(registry: client.Registry, prefix = ''): void {
  client.collectDefaultMetrics({ register: registry, prefix, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  for (const name of MISNAMED) registry.removeSingleMetric(`${prefix}${name}`);
}
