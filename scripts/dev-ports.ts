// The ports `npm start` gives the edge agent. A flag wins; without one, a port
// keeps its default distance from --http-port when that is given (8443 and 9091
// beside 8090, so 9443 and 10091 beside 9090), so that a second start with other
// --port/--http-port values collides with the first on no port at all.
export const AGENT_PORT_DEFAULTS = { http: 8090, https: 8443, metrics: 9091 } as const;

export function agentPorts(env: Record<string, string | undefined>): { http: number; https: number; metrics: number } {
  const http = Number(env.HTTP_PORT ?? AGENT_PORT_DEFAULTS.http);
  const follow = (given: string | undefined, fallback: number): number => {
    if (given !== undefined) return Number(given);
    const derived = http + fallback - AGENT_PORT_DEFAULTS.http;
    return env.HTTP_PORT !== undefined && derived <= 65535 ? derived : fallback;
  };
  return { http, https: follow(env.HTTPS_PORT, AGENT_PORT_DEFAULTS.https), metrics: follow(env.METRICS_PORT, AGENT_PORT_DEFAULTS.metrics) };
}
