// Prometheus metrics of the control channel on this replica (issue 24 item 5):
// agents connected, acknowledgements by kind and outcome, how long nodes take
// to acknowledge a purge this replica pushed and a configuration version
// (push to ack: the publish's propagation to each node), and traffic reports
// stored or recognised as copies. Registered on the control plane's /metrics
// registry once it exists (server.ts); counting before that is kept.
// Acknowledgements are counted once per agent per purge (a thousand per purge
// at full size): the ack counter counts in plain numbers folded into the
// prom-client counter when it is scraped, and the ack-time histograms are
// LabelledHistograms (no label hashing per observation).
import { Counter, Gauge, type Registry } from 'prom-client';
import { LabelledHistogram } from '../../../shared/src/metrics/labelled-histogram.ts';

const ACK_KINDS = ['config', 'purge', 'prefetch'];

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class ChannelMetrics {
  readonly #connected: Gauge;
  /** Acknowledgements counted since the last scrape: kind → [ok, nack]. */
  readonly #ackCounts = new Map<string, [number, number]>(ACK_KINDS.map((kind) => [kind, [0, 0] as [number, number]]));
  readonly #acks: Counter;
  readonly #purge = new LabelledHistogram({ name: 'edge_channel_purge_ack_seconds', help: 'From a purge pushed by this replica to each node\'s acknowledgement', label: 'outcome', values: ['ok', 'failed'], buckets: SECONDS });
  readonly #publish = new LabelledHistogram({ name: 'edge_channel_config_ack_seconds', help: 'From a configuration version pushed to a node to its acknowledgement (applied or refused)', label: 'outcome', values: ['applied', 'refused'], buckets: SECONDS });
  readonly #reports = new Counter({ name: 'edge_channel_traffic_reports_total', help: 'Traffic reports from edge agents: stored, or a copy of one stored before (counted once)', labelNames: ['outcome'] as const, registers: [] });
  readonly #rollups = new Counter({ name: 'edge_channel_traffic_rollups_total', help: 'Per-minute endpoint rollups stored from traffic reports', registers: [] });

  constructor(connected: () => number) {
    const counts = this.#ackCounts;
    this.#acks = new Counter({
      name: 'edge_channel_acks_total', help: 'Acknowledgements from edge agents by kind (config, purge, prefetch) and outcome (ok, nack)', labelNames: ['kind', 'outcome'] as const, registers: [],
      collect() {
        for (const [kind, count] of counts) {
          if (count[0]) this.inc({ kind, outcome: 'ok' }, count[0]);
          if (count[1]) this.inc({ kind, outcome: 'nack' }, count[1]);
          count[0] = count[1] = 0;
        }
      },
    });
    this.#connected = new Gauge({ name: 'edge_channel_connected_agents', help: 'Edge agents with a stream open to this control-plane replica', registers: [], collect() { this.set(connected()); } });
    // Every series an alert reads exists from the start at zero: increase() and rate() see a node's first nack or
    // failed purge, which a series born with its first event at 1 would hide.
    for (const kind of ACK_KINDS) for (const outcome of ['ok', 'nack']) this.#acks.inc({ kind, outcome }, 0);
    for (const outcome of ['stored', 'copy']) this.#reports.inc({ outcome }, 0);
  }

  ack(kind: string, ok: boolean): void {
    let count = this.#ackCounts.get(kind);
    if (!count) this.#ackCounts.set(kind, (count = [0, 0]));
    count[ok ? 0 : 1]++;
  }

  purgeAcked(seconds: number, ok: boolean): void {
    this.#purge.observe(ok ? 'ok' : 'failed', seconds);
  }

  configAcked(seconds: number, ok: boolean): void {
    this.#publish.observe(ok ? 'applied' : 'refused', seconds);
  }

  reports(stored: number, copies: number, rollups: number): void {
    if (stored) this.#reports.inc({ outcome: 'stored' }, stored);
    if (copies) this.#reports.inc({ outcome: 'copy' }, copies);
    if (rollups) this.#rollups.inc(rollups);
  }

  register(registry: Registry): void {
    for (const metric of [this.#connected, this.#acks, this.#purge, this.#publish, this.#reports, this.#rollups]) registry.registerMetric(metric as never);
  }
}
