// Regression (ops notes, issue 26): the channel's counters and histograms are
// created at zero for every label set an alert reads, so increase() over a
// window sees a node's first nack or failed purge.
import { Registry } from 'prom-client';
import t from 'tap';
import { ChannelMetrics } from './channel-metrics.ts';

/** Channel metrics registered on a registry of their own, and a scrape of it. */
function registered(connected: number) {
  const registry = new Registry();
  const metrics = new ChannelMetrics(() => connected);
  metrics.register(registry);
  return { metrics, scrape: () => registry.metrics() };
}

t.test('the series alerts read exist at zero before any event', async (t) => {
  const text = await registered(0).scrape();
  for (const kind of ['config', 'purge', 'prefetch']) {
    for (const outcome of ['ok', 'nack']) t.match(text, `edge_channel_acks_total{kind="${kind}",outcome="${outcome}"} 0`, `acks ${kind} ${outcome}`);
  }
  t.match(text, 'edge_channel_purge_ack_seconds_count{outcome="failed"} 0');
  t.match(text, 'edge_channel_purge_ack_seconds_count{outcome="ok"} 0');
  t.match(text, 'edge_channel_config_ack_seconds_count{outcome="refused"} 0');
  t.match(text, 'edge_channel_traffic_reports_total{outcome="copy"} 0');
  t.match(text, 'edge_channel_connected_agents 0');
});

t.test('an event counts from zero', async (t) => {
  const { metrics, scrape } = registered(2);
  metrics.ack('purge', false);
  metrics.purgeAcked(0.02, false);
  const text = await scrape();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="nack"} 1');
  t.match(text, 'edge_channel_purge_ack_seconds_count{outcome="failed"} 1');
  t.match(text, 'edge_channel_connected_agents 2');
});

t.test('acks counted between scrapes are folded in once: none lost, none counted twice', async (t) => {
  const { metrics, scrape } = registered(0);
  for (let i = 0; i < 5; i++) metrics.ack('purge', true);
  metrics.ack('config', false);
  t.match(await scrape(), 'edge_channel_acks_total{kind="purge",outcome="ok"} 5');
  let text = await scrape();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="ok"} 5', 'a second scrape adds nothing');
  t.match(text, 'edge_channel_acks_total{kind="config",outcome="nack"} 1');
  metrics.ack('purge', true);
  metrics.ack('other', true);
  text = await scrape();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="ok"} 6');
  t.match(text, 'edge_channel_acks_total{kind="other",outcome="ok"} 1', 'a kind without a name is counted too');
});
