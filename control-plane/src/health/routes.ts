// Readiness (document 3 §4.13): no authentication; 200 when PostgreSQL and
// the cache store (Redis) answer, 503 otherwise, with per-component latency.
// Beyond the spec's {status, latency_ms}, the database and store components
// name what they run on: `embedded` (PGlite) or `postgresql`, `in-process` or
// `redis`, so a report never claims a server that is not there.
import { z } from 'zod';
import { defineRoute, reply } from '../http/route.ts';

const component = z.object({ status: z.enum(['ok', 'error', 'not_configured']), latency_ms: z.number().int().nullable() });
const readinessReport = z.object({
  status: z.enum(['ok', 'unavailable']),
  version: z.string(),
  timestamp: z.string(),
  components: z.object({
    postgresql: component.extend({ backend: z.enum(['embedded', 'postgresql']).describe('embedded: PGlite inside the control plane; postgresql: a PostgreSQL server (DATABASE_URL)') }),
    redis: component.extend({ backend: z.enum(['in-process', 'redis']).describe('in-process: the single-replica store inside the control plane; redis: a Redis server (REDIS_URL)') }),
    edge_config: component,
  }),
});

const PROBE_TIMEOUT_MS = 2000;

async function probe(check: () => Promise<number>): Promise<z.infer<typeof component>> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const latency = await Promise.race([
      check(),
      new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error('timeout')), PROBE_TIMEOUT_MS); }),
    ]);
    return { status: 'ok', latency_ms: Math.round(latency) };
  } catch {
    return { status: 'error', latency_ms: null };
  } finally {
    clearTimeout(timer);
  }
}

export const readiness = defineRoute({
  method: 'get',
  path: '/v1/cdn/health/ready',
  summary: 'Readiness of the control plane',
  tags: ['CDN health'],
  access: 'public',
  responses: { 200: readinessReport, 503: readinessReport },
  async handler({ app }) {
    const [postgresql, redis, edge_config] = await Promise.all([
      probe(() => app.db.ping()),
      probe(() => app.store.ping()),
      app.edgeConfigHealth ? app.edgeConfigHealth() : Promise.resolve({ status: 'not_configured' as const, latency_ms: null }),
    ]);
    const ready = postgresql.status === 'ok' && redis.status === 'ok' && edge_config.status !== 'error';
    return reply.bare({
      status: ready ? 'ok' : 'unavailable',
      version: app.version,
      timestamp: new Date().toISOString(),
      components: {
        postgresql: { ...postgresql, backend: app.db.embedded ? 'embedded' : 'postgresql' },
        redis: { ...redis, backend: app.store.kind === 'redis' ? 'redis' : 'in-process' },
        edge_config,
      },
    }, ready ? 200 : 503);
  },
});

export const healthRoutes = [readiness];
