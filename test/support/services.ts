// Where tests find PostgreSQL and Redis. scripts/test.ts probes once per run
// and passes what it found through the environment; a test file run on its
// own (npx tap file) probes for itself.
import net from 'node:net';

export const DEFAULT_PG_URL = 'postgresql://postgres@127.0.0.1:5432/postgres';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** Resolves true when something accepts TCP connections at the URL's host and port. */
export function reachable(url: string, timeoutMs = 1000): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    const done = (ok: boolean) => { socket.destroy(); resolve(ok); };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export interface TestServices {
  /** Admin URL of a real PostgreSQL server, or undefined for embedded PGlite. */
  postgresUrl?: string;
  /** A real Redis, or undefined for the in-process store. */
  redisUrl?: string;
}

export async function detectServices(env = process.env): Promise<TestServices> {
  if (env.TEST_SERVICES_DETECTED === '1') {
    return { postgresUrl: env.TEST_POSTGRES_URL || undefined, redisUrl: env.TEST_REDIS_URL || undefined };
  }
  const pg = env.TEST_POSTGRES_URL || DEFAULT_PG_URL;
  const redis = env.TEST_REDIS_URL || DEFAULT_REDIS_URL;
  const [pgUp, redisUp] = await Promise.all([reachable(pg), reachable(redis)]);
  return { postgresUrl: pgUp ? pg : undefined, redisUrl: redisUp ? redis : undefined };
}
