// Readiness (document 3 §4.13): no authentication; 200 when PostgreSQL and
// the cache store (Redis) answer, 503 otherwise, with per-component latency.
// Beyond the spec's {status, latency_ms}, the database and store components
// name what they run on: `embedded` (PGlite) or `postgresql`, `in-process` or
// `redis`, so a report never claims a server that is not there.
import { z } from 'zod';
import { timestamp } from '../http/schemas.ts';
import type { CoreServices } from '../core/services.ts';
import { withTimeout } from '../core/timeout.ts';
import { bare, reply, routesFor } from '../http/route.ts';

/**
 * Readiness learns the edge configuration's health from the edge channel, when one runs: `degraded`
 * (agents cannot connect to this replica) is reported but does not make the control plane unready.
 */
export interface HealthServices extends CoreServices {
  edgeConfigHealth?: () => Promise<{ status: 'ok' | 'degraded' | 'error' | 'not_configured'; latency_ms: number | null }>;
}
const defineRoute = routesFor<HealthServices>();

const component = z.object({ status: z.enum(['ok', 'degraded', 'error', 'not_configured']), latency_ms: z.number().int().nullable() });
const readinessReport = z.object({
  status: z.enum(['ok', 'unavailable']),
  version: z.string(),
  timestamp: timestamp(),
  components: z.object({
    postgresql: component.extend({ backend: z.enum(['embedded', 'postgresql']).describe('embedded: PGlite inside the control plane; postgresql: a PostgreSQL server (DATABASE_URL)') }),
    redis: component.extend({ backend: z.enum(['in-process', 'redis']).describe('in-process: the single-replica store inside the control plane; redis: a Redis server (REDIS_URL)') }),
    edge_config: component,
  }),
});

const PROBE_TIMEOUT_MS = 2000;

async function probe(check: () => Promise<number>): Promise<z.infer<typeof component>> {
  try {
    const latency = await withTimeout(check(), PROBE_TIMEOUT_MS, () => new Error('timeout'));
    return { status: 'ok', latency_ms: Math.round(latency) };
  } catch {
    return { status: 'error', latency_ms: null };
  }
}

export const readiness = defineRoute({
  method: 'get',
  path: '/v1/cdn/health/ready',
  summary: 'Readiness of the control plane',
  tags: ['CDN health'],
  access: 'public',
  responses: { 200: bare(readinessReport), 503: bare(readinessReport) },
  async handler({ app }) {
    const [postgresql, redis, edge_config] = await Promise.all([
      probe(() => app.db.ping()),
      probe(() => app.store.ping()),
      app.edgeConfigHealth ? app.edgeConfigHealth() : Promise.resolve({ status: 'not_configured' as const, latency_ms: null }),
    ]);
    const ready = postgresql.status === 'ok' && redis.status === 'ok' && edge_config.status !== 'error';
    return reply.with(ready ? 200 : 503, {
      status: ready ? 'ok' as const : 'unavailable' as const,
      version: app.version,
      timestamp: new Date(),
      components: {
        postgresql: { ...postgresql, backend: app.db.embedded ? 'embedded' as const : 'postgresql' as const },
        redis: { ...redis, backend: app.store.kind === 'redis' ? 'redis' as const : 'in-process' as const },
        edge_config,
      },
    });
  },
});

export const healthRoutes = [readiness];
