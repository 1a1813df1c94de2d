// Origin health probes: each enabled origin is probed every
// health_check_interval_seconds through its own pool (so the SSRF guard applies),
// at its health_check_url, or at the origin's root when it has none (document 3:
// "defaults to the origin root"). Consecutive failures are counted; 1–2 make it
// degraded, 3 or more unhealthy. A health_check_url must answer below 400; the
// root, which many origins do not serve, must answer at all (below 500).
import type { CompiledOrigin, RoutingTable } from './routing.ts';
import { CDN_LOOP_TOKEN } from './loop.ts';
import { fetchOrigin, type OriginPools } from './origin-client.ts';

export interface OriginHealthState {
  originId: string;
  status: 'healthy' | 'degraded' | 'unhealthy' | 'unknown';
  latencyMs: number;
  lastSuccessAtMs: number;
  lastFailureAtMs: number;
  failureReason: string;
  consecutiveFailures: number;
  checkedAtMs: number;
}

const UNHEALTHY_AFTER = 3;

export class HealthProber {
  private readonly states = new Map<string, OriginHealthState>();
  private readonly timers = new Map<string, { timer: NodeJS.Timeout; key: string }>();
  private readonly pools: OriginPools;

  constructor(pools: OriginPools) {
    this.pools = pools;
  }

  /** Starts, keeps or stops probes to match the origins of the new table. */
  sync(table: RoutingTable): void {
    const wanted = new Map<string, CompiledOrigin>();
    for (const o of table.origins.values()) if (o.snapshot.enabled) wanted.set(o.id, o);
    for (const [id, t] of this.timers) {
      const o = wanted.get(id);
      if (!o || probeKey(o) !== t.key) {
        clearInterval(t.timer);
        this.timers.delete(id);
      }
    }
    for (const id of [...this.states.keys()]) if (!table.origins.has(id)) this.states.delete(id);
    for (const [id, o] of wanted) {
      if (this.timers.has(id)) continue;
      const timer = setInterval(() => void this.probe(o), o.snapshot.health_check_interval_seconds * 1000);
      timer.unref();
      this.timers.set(id, { timer, key: probeKey(o) });
      if (!this.states.has(id)) this.states.set(id, { originId: id, status: 'unknown', latencyMs: 0, lastSuccessAtMs: 0, lastFailureAtMs: 0, failureReason: '', consecutiveFailures: 0, checkedAtMs: 0 });
      void this.probe(o);
    }
  }

  async probe(o: CompiledOrigin): Promise<OriginHealthState> {
    const started = Date.now();
    const explicit = o.snapshot.health_check_url;
    const url = explicit ?? `${o.pathPrefix}/`;
    let path = url;
    let host = o.hostHeader;
    if (/^https?:\/\//i.test(url)) {
      const u = new URL(url);
      path = u.pathname + u.search;
      host = u.host;
    }
    let ok = false;
    let reason = '';
    try {
      const res = await fetchOrigin(this.pools, o, { method: 'GET', path, headers: { host, 'user-agent': 'edge-agent-health/1', 'cdn-loop': CDN_LOOP_TOKEN } });
      await res.body.dump().catch(() => {});
      ok = res.statusCode < (explicit ? 400 : 500);
      if (!ok) reason = `status ${res.statusCode}`;
    } catch (err) {
      reason = (err as Error).message;
    }
    const now = Date.now();
    const prev = this.states.get(o.id);
    const failures = ok ? 0 : (prev?.consecutiveFailures ?? 0) + 1;
    const state: OriginHealthState = {
      originId: o.id,
      status: ok ? 'healthy' : failures >= UNHEALTHY_AFTER ? 'unhealthy' : 'degraded',
      latencyMs: now - started,
      lastSuccessAtMs: ok ? now : (prev?.lastSuccessAtMs ?? 0),
      lastFailureAtMs: ok ? (prev?.lastFailureAtMs ?? 0) : now,
      failureReason: ok ? '' : reason,
      consecutiveFailures: failures,
      checkedAtMs: now,
    };
    if (this.timers.has(o.id) || !prev) this.states.set(o.id, state);
    return state;
  }

  report(): OriginHealthState[] {
    return [...this.states.values()];
  }

  stop(): void {
    for (const t of this.timers.values()) clearInterval(t.timer);
    this.timers.clear();
  }
}

function probeKey(o: CompiledOrigin): string {
  return `${o.poolKey}|${o.snapshot.health_check_url}|${o.snapshot.health_check_interval_seconds}`;
}
