// Regression (ops notes, issue 26): the channel's counters and histograms are
// created at zero for every label set an alert reads, so increase() over a
// window sees a node's first nack or failed purge.
import { Registry } from 'prom-client';
import t from 'tap';
import { ChannelMetrics } from './channel-metrics.ts';

t.test('the series alerts read exist at zero before any event', async (t) => {
  const registry = new Registry();
  new ChannelMetrics(() => 0).register(registry);
  const text = await registry.metrics();
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
  const registry = new Registry();
  const metrics = new ChannelMetrics(() => 2);
  metrics.register(registry);
  metrics.ack('purge', false);
  metrics.purgeAcked(0.02, false);
  const text = await registry.metrics();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="nack"} 1');
  t.match(text, 'edge_channel_purge_ack_seconds_count{outcome="failed"} 1');
  t.match(text, 'edge_channel_connected_agents 2');
});

t.test('acks counted between scrapes are folded in once: none lost, none counted twice', async (t) => {
  const registry = new Registry();
  const metrics = new ChannelMetrics(() => 0);
  metrics.register(registry);
  for (let i = 0; i < 5; i++) metrics.ack('purge', true);
  metrics.ack('config', false);
  t.match(await registry.metrics(), 'edge_channel_acks_total{kind="purge",outcome="ok"} 5');
  let text = await registry.metrics();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="ok"} 5', 'a second scrape adds nothing');
  t.match(text, 'edge_channel_acks_total{kind="config",outcome="nack"} 1');
  metrics.ack('purge', true);
  metrics.ack('other', true);
  text = await registry.metrics();
  t.match(text, 'edge_channel_acks_total{kind="purge",outcome="ok"} 6');
  t.match(text, 'edge_channel_acks_total{kind="other",outcome="ok"} 1', 'a kind without a name is counted too');
});
