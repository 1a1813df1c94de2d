// prom-client's default process and Node.js metrics, less the three gauges it
// names with a counter's `_total` suffix (nodejs_active_handles_total,
// nodejs_active_requests_total, nodejs_active_resources_total), which
// `promtool check metrics` rejects; their per-type gauges (nodejs_active_handles
// etc.) stay and add up to the same numbers.
import client from 'prom-client';

const MISNAMED = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export function collectDefaultMetrics(registry: client.Registry, prefix = ''): void {
  client.collectDefaultMetrics({ register: registry, prefix });
  for (const name of MISNAMED) registry.removeSingleMetric(`${prefix}${name}`);
}
