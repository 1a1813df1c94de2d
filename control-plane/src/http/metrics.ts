import { Registry, Histogram, collectDefaultMetrics } from 'prom-client';

export interface HttpMetrics {
  registry: Registry;
  requestDuration: Histogram<'method' | 'route' | 'status'>;
}

export function createHttpMetrics(): HttpMetrics {
  // A registry per app, so tests that start several apps in one process don't collide.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requestDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by matched route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  return { registry, requestDuration };
}
