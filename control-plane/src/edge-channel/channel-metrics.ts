// Prometheus metrics of the control channel on this replica (issue 24 item 5):
// agents connected, acknowledgements by kind and outcome, how long nodes take
// to acknowledge a purge this replica pushed and a configuration version
// (push to ack: the publish's propagation to each node), and traffic reports
// stored or recognised as copies. Registered on the control plane's /metrics
// registry once it exists (server.ts); counting before that is kept.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class ChannelMetrics {
  readonly #connected: Gauge;
  readonly #acks = new Counter({ name: 'edge_channel_acks_total', help: 'Acknowledgements from edge agents by kind (config, purge, prefetch) and outcome (ok, nack)', labelNames: ['kind', 'outcome'] as const, registers: [] });
  readonly #purge = new Histogram({ name: 'edge_channel_purge_ack_seconds', help: 'From a purge pushed by this replica to each node\'s acknowledgement', labelNames: ['outcome'] as const, buckets: SECONDS, registers: [] });
  readonly #publish = new Histogram({ name: 'edge_channel_config_ack_seconds', help: 'From a configuration version pushed to a node to its acknowledgement (applied or refused)', labelNames: ['outcome'] as const, buckets: SECONDS, registers: [] });
  readonly #reports = new Counter({ name: 'edge_channel_traffic_reports_total', help: 'Traffic reports from edge agents: stored, or a copy of one stored before (counted once)', labelNames: ['outcome'] as const, registers: [] });
  readonly #rollups = new Counter({ name: 'edge_channel_traffic_rollups_total', help: 'Per-minute endpoint rollups stored from traffic reports', registers: [] });

  constructor(connected: () => number) {
    this.#connected = new Gauge({ name: 'edge_channel_connected_agents', help: 'Edge agents with a stream open to this control-plane replica', registers: [], collect() { this.set(connected()); } });
    // Every series an alert reads exists from the start at zero: increase() and rate() see a node's first nack or
    // failed purge, which a series born with its first event at 1 would hide.
    for (const kind of ['config', 'purge', 'prefetch']) for (const outcome of ['ok', 'nack']) this.#acks.inc({ kind, outcome }, 0);
    for (const outcome of ['ok', 'failed']) this.#purge.zero({ outcome });
    for (const outcome of ['applied', 'refused']) this.#publish.zero({ outcome });
    for (const outcome of ['stored', 'copy']) this.#reports.inc({ outcome }, 0);
  }

  ack(kind: string, ok: boolean): void {
    this.#acks.inc({ kind, outcome: ok ? 'ok' : 'nack' });
  }

  purgeAcked(seconds: number, ok: boolean): void {
    this.#purge.observe({ outcome: ok ? 'ok' : 'failed' }, seconds);
  }

  configAcked(seconds: number, ok: boolean): void {
    this.#publish.observe({ outcome: ok ? 'applied' : 'refused' }, seconds);
  }

  reports(stored: number, copies: number, rollups: number): void {
    if (stored) this.#reports.inc({ outcome: 'stored' }, stored);
    if (copies) this.#reports.inc({ outcome: 'copy' }, copies);
    if (rollups) this.#rollups.inc(rollups);
  }

  register(registry: Registry): void {
    for (const metric of [this.#connected, this.#acks, this.#purge, this.#publish, this.#reports, this.#rollups]) registry.registerMetric(metric);
  }
}
