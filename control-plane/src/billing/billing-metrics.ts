// Prometheus metrics of billing on this replica: what the billing clock (and a
// retry a new payment method triggers) did — invoices issued, charges paid and
// declined, subscriptions resumed, canceled, expired — and the subscriptions
// by status, read from the database at scrape time (the same on every replica).
import { Counter, type Registry } from 'prom-client';
import type { Logger } from 'pino';
import type { EntityManager } from '@mikro-orm/postgresql';
import { queryGauge } from '../core/query-gauge.ts';
import { SUBSCRIPTION_STATUSES } from './billing.entities.ts';

/** What one pass of the billing clock did (billing-clock.ts ClockSummary's keys). */
export const CLOCK_EVENTS = ['resumed', 'canceled', 'expired', 'invoiced', 'paid', 'declined', 'uncollectible'] as const;
export type ClockCounts = Record<(typeof CLOCK_EVENTS)[number], number>;

export class BillingMetrics {
  readonly #events = new Counter({
    name: 'billing_clock_events_total',
    help: 'What the billing clock did on this replica: subscriptions resumed, canceled, expired; renewal invoices issued; charges paid, declined; invoices uncollectible',
    labelNames: ['event'] as const, registers: [],
  });
  readonly #subscriptions;

  constructor(em: () => EntityManager, log: Logger) {
    for (const event of CLOCK_EVENTS) this.#events.inc({ event }, 0);
    this.#subscriptions = queryGauge({
      name: 'billing_subscriptions', help: 'Subscriptions by status (read from the database at most every 30 s)',
      labelNames: ['status'] as const, declared: SUBSCRIPTION_STATUSES.map((status) => ({ status })), log,
      load: async () => (await em().execute<{ status: string; n: number }[]>('select status, count(*)::float8 as n from billing_subscription group by status'))
        .map((row) => ({ labels: { status: row.status }, value: row.n })),
    });
  }

  clock(summary: ClockCounts): void {
    for (const event of CLOCK_EVENTS) if (summary[event] > 0) this.#events.inc({ event }, summary[event]);
  }

  register(registry: Registry): void {
    registry.registerMetric(this.#events);
    registry.registerMetric(this.#subscriptions);
  }
}
