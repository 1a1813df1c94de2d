// A Prometheus gauge read from the database when /metrics is scraped: at most
// once per `ttlMs` (two replicas scraped every 15 s cost one query each per
// period), bounded by `timeoutMs`. A query that fails or times out keeps the
// values last read and is logged; the declared label sets always show (zero
// until read), so alerts and dashboards find their series from the start.
import { Gauge } from 'prom-client';
import type { Logger } from 'pino';
import { withTimeout } from './timeout.ts';

export interface QueryGaugeOptions<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  /** Label sets shown at zero when the query returns nothing for them. */
  declared: readonly Partial<Record<L, string>>[];
  load: () => Promise<{ labels: Partial<Record<L, string>>; value: number }[]>;
  log: Logger;
  ttlMs?: number;
  timeoutMs?: number;
}

export function queryGauge<L extends string>(options: QueryGaugeOptions<L>): Gauge<L> {
  const { ttlMs = 30_000, timeoutMs = 5_000 } = options;
  let readAt = -Infinity;
  let values: { labels: Partial<Record<L, string>>; value: number }[] = [];
  return new Gauge<L>({
    name: options.name,
    help: options.help,
    labelNames: options.labelNames,
    registers: [],
    async collect() {
      if (performance.now() - readAt >= ttlMs) {
        try {
          values = await withTimeout(options.load(), timeoutMs, () => new Error(`timed out after ${timeoutMs} ms`));
          readAt = performance.now();
        } catch (error) {
          options.log.warn({ err: error, metric: options.name }, 'metrics: the query behind a gauge failed; its last values stay');
        }
      }
      this.reset();
      for (const labels of options.declared) this.set(labels, 0);
      for (const v of values) this.set(v.labels, v.value);
    },
  });
}
