// Origin shield between two agents (issue 23 item 5), with real listeners and
// a real origin: an edge in one region and a shield node of the endpoint's
// shield region, given the same shield map by hand. The edge's miss goes to
// the shield (signed hop, viewer-shaped request: the keyed host and path, none
// of the origin's own headers), the shield answers through its cache without
// the viewer's policies or response shaping (the edge applies them), both
// access records say so (`via` / `from`), a stale or foreign hop header counts
// for nothing, rendezvous hashing keeps each key on one node (and passes over
// a node marked down), and the latency to other regions' shields is measured
// (those that do not answer are reported unreachable).
import t from 'tap';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { ShieldDirectory } from '../src/proxy/shield-directory.ts';
import { startReceiver, bodyText } from '../../test/support/log-receivers.ts';
import { eventually } from '../../test/support/eventually.ts';
import { HOST, startAgent, startOrigin } from './helpers.ts';

const keys = [randomBytes(32), randomBytes(32)];

t.test('hop headers: signed with the first key, accepted with either within a minute, refused otherwise', async (t) => {
  const a = new ShieldDirectory({ region: 'edge-r', nodeId: 'node-a', probe: false });
  const s = new ShieldDirectory({ region: 'shield-r', nodeId: 'node-s', probe: false });
  a.apply({ regions: [], hopKeys: keys });
  s.apply({ regions: [], hopKeys: [keys[1]!, keys[0]!] });
  const now = Date.now();
  const header = a.hopHeader('GET', 'cdn.test', '/a?b=1', now);
  t.equal(s.verifyHop(header, 'GET', 'cdn.test', '/a?b=1', now), 'node-a', 'with the shield\'s second key (a day boundary)');
  t.equal(s.verifyHop(header, 'GET', 'cdn.test', '/a?b=1', now + 59_000), 'node-a', 'within the minute');
  t.equal(s.verifyHop(header, 'GET', 'cdn.test', '/a?b=1', now + 61_000), null, 'stale');
  t.equal(s.verifyHop(header, 'GET', 'cdn.test', '/a?b=2', now), null, 'another target');
  t.equal(s.verifyHop(header, 'HEAD', 'cdn.test', '/a?b=1', now), null, 'another method');
  t.equal(s.verifyHop(header, 'GET', 'other.test', '/a?b=1', now), null, 'another host');
  t.equal(s.verifyHop(header.replace('node-a', 'node-b'), 'GET', 'cdn.test', '/a?b=1', now), null, 'another node id');
  const other = new ShieldDirectory({ region: 'x', nodeId: 'node-x', probe: false });
  other.apply({ regions: [], hopKeys: [randomBytes(32)] });
  t.equal(s.verifyHop(other.hopHeader('GET', 'cdn.test', '/a', now), 'GET', 'cdn.test', '/a', now), null, 'a key the shield does not hold');
  for (const bad of ['', 'x', 'a b c', `node-a ${Math.floor(now / 1000)} ${'A'.repeat(42)}`]) t.equal(s.verifyHop(bad, 'GET', 'cdn.test', '/a', now), null, JSON.stringify(bad));
});

t.test('rendezvous hashing: one node per key, about even, and a node leaving moves only its own keys', async (t) => {
  const d = new ShieldDirectory({ region: 'edge-r', nodeId: 'e', probe: false });
  const nodes = (n: number) => Array.from({ length: n }, (_, i) => ({ nodeId: `node-${i}`, address: `http://10.0.0.${i + 1}:8090` }));
  d.apply({ regions: [{ region: 'shield-r', nodes: nodes(3) }], hopKeys: keys });
  const keysOf = Array.from({ length: 3000 }, (_, i) => `ep\x1f/object-${i}`);
  const before = keysOf.map((k) => d.target('shield-r', k)!.nodeId);
  t.same(keysOf.map((k) => d.target('shield-r', k)!.nodeId), before, 'stable');
  const counts = new Map<string, number>();
  for (const n of before) counts.set(n, (counts.get(n) ?? 0) + 1);
  t.ok([...counts.values()].every((c) => c > 800 && c < 1200), `about a third each (${[...counts.values()].join(', ')})`);
  d.apply({ regions: [{ region: 'shield-r', nodes: nodes(2) }], hopKeys: keys });
  const after = keysOf.map((k) => d.target('shield-r', k)!.nodeId);
  t.ok(keysOf.every((_, i) => before[i] === 'node-2' || after[i] === before[i]), 'only node-2\'s keys moved');
  t.equal(d.target('edge-r', 'k'), null, 'its own region: no shield hop');
  t.equal(d.target('nowhere', 'k'), null, 'a region without shield nodes');
  t.equal(d.target(null, 'k'), null);
});

t.test('an edge\'s miss is answered through the shield, which skips the viewer\'s policies and shaping; both access records say so', async (t) => {
  const seen: { url: string; headers: Record<string, string | string[] | undefined> }[] = [];
  const origin = await startOrigin((req, res) => {
    seen.push({ url: req.url!, headers: req.headers });
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
    res.end(`origin ${req.url}`);
  });
  t.teardown(() => origin.close());
  const logs = await startReceiver(t);
  const snapshot = {
    version: 1,
    endpoints: [{
      id: 'ep1', hostname: HOST, default_origin_id: 'o1', shield_region: 'shield-r',
      origins: [{ id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0, custom_headers: { 'x-origin-secret': 's3cr3t' } }],
      // Blocks 127.0.0.1, where the shield's caller (the edge) comes from: a hop must not meet it.
      ip_rules: [{ id: 'r1', action: 'block', cidr: '127.0.0.0/8', priority: 1 }],
      response_headers_policy_id: 'p1',
    }],
    response_headers_policies: [{ id: 'p1', custom_response_headers: [{ name: 'x-shaped-by', value: 'policy', override: true }] }],
    log_drains: [{ id: 'd1', destination_type: 'http', destination_config: { url: `${logs.url}/in`, allow_private_network: true }, log_format: 'ndjson', fields: ['path', 'status', 'cache_status', 'shield', 'edge_node'] }],
  };
  const shield = await startAgent(snapshot, { region: 'shield-r', nodeId: 'node-s', nodeName: 'shield-node', logDrains: { flushIntervalMs: 20 } });
  const edge = await startAgent(snapshot, { region: 'edge-r', nodeId: 'node-e', nodeName: 'edge-node', logDrains: { flushIntervalMs: 20 } });
  t.teardown(async () => { await edge.close(); await shield.close(); });
  const map = { regions: [{ region: 'shield-r', nodes: [{ nodeId: 'node-s', address: `http://127.0.0.1:${shield.port}` }] }], hopKeys: keys };
  shield.agent.applyShieldMap(map);
  edge.agent.applyShieldMap(map);

  t.equal((await edge.get('/blocked')).status, 403, 'the edge applies the endpoint\'s IP rule to its viewer (also at 127.0.0.1)');
  // The edge without the rule (its viewer may come in), the shield with it.
  edge.agent.applyConfig({ ...snapshot, version: 2, endpoints: [{ ...snapshot.endpoints[0], ip_rules: [] }] });
  const first = await edge.get('/video/a.ts?q=1');
  t.equal(first.status, 200, 'the shield served the hop although the rule blocks its caller\'s address: the edge checked its viewer');
  t.equal(first.body, 'origin /video/a.ts?q=1');
  t.equal(first.headers['x-shaped-by'], 'policy', 'the edge shaped the answer');
  t.match(first.headers['cache-status'], /^edge-shield-r; fwd=miss, edge-edge-r; fwd=miss$/);
  t.equal(seen.length, 1);
  t.equal(seen[0]!.headers['x-origin-secret'], 's3cr3t', 'the shield adds the origin\'s headers itself');
  t.equal(seen[0]!.headers['x-edge-shield'], undefined, 'the hop header never reaches the origin');
  t.match(String(seen[0]!.headers['x-forwarded-for']), /127\.0\.0\.1, 127\.0\.0\.1$/, 'the viewer, then the edge');
  const shieldHit = await shield.get('/video/a.ts?q=1');
  t.equal(shieldHit.status, 403, 'a viewer of the shield itself still meets the IP rule');
  t.equal(shieldHit.headers['x-shaped-by'], 'policy', 'and gets the shaping');

  await t.test('the access records', async (t) => {
    const lines = () => logs.requests.flatMap((r) => bodyText(r).split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>));
    await eventually(() => lines().filter((l) => l.path === '/video/a.ts').length >= 3, 'both agents shipped their records');
    const records = lines().filter((l) => l.path === '/video/a.ts');
    t.ok(records.some((r) => r.edge_node === 'shield-node' && r.shield === 'from node-e' && r.cache_status === 'MISS' && r.status === 200), 'the shield: whose hop it answered');
    t.ok(records.some((r) => r.edge_node === 'shield-node' && r.shield === null && r.status === 403), 'the shield\'s own viewer: no hop');
    t.ok(records.some((r) => r.edge_node === 'edge-node' && r.shield === 'via node-s' && r.cache_status === 'MISS'), 'the edge: which shield it asked');
  });
});

t.test('the connect time to other regions\' shield nodes that answer is measured (the fastest node per region); regions none of whose nodes answer are reported unreachable', async (t) => {
  const listening = await startOrigin((_req, res) => res.end());
  t.teardown(() => listening.close());
  // Takes connections and never writes: connecting is not answering.
  const silent = net.createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { silent.close(); });
  const silentPort = (silent.address() as net.AddressInfo).port;
  const d = new ShieldDirectory({ region: 'edge-r', nodeId: 'e', probe: true });
  t.teardown(() => d.stop());
  d.apply({
    regions: [
      { region: 'near', nodes: [{ nodeId: 'n1', address: `http://127.0.0.1:${listening.port}` }, { nodeId: 'n2', address: 'http://127.0.0.1:9' }] },
      { region: 'down', nodes: [{ nodeId: 'n3', address: 'http://127.0.0.1:9' }] },
      { region: 'silent', nodes: [{ nodeId: 'n5', address: `http://127.0.0.1:${silentPort}` }] },
      { region: 'edge-r', nodes: [{ nodeId: 'n4', address: `http://127.0.0.1:${listening.port}` }] },
    ],
    hopKeys: keys,
  });
  await eventually(() => d.measured.length + d.unreachableRegions.length === 3, 'measured');
  t.same(d.measured.map((m) => m.region), ['near'], 'its own region and a region without an answering node are not reported reachable');
  t.ok(d.measured[0]!.latencyMs >= 0 && d.measured[0]!.latencyMs < 2000);
  t.same(d.unreachableRegions, ['down', 'silent'], 'refused, or connected and silent: unreachable');
});

t.test('a node marked down is passed over for the others of its region, and with none left the miss goes to the origin', async (t) => {
  const d = new ShieldDirectory({ region: 'edge-r', nodeId: 'e', probe: false });
  d.apply({ regions: [{ region: 'shield-r', nodes: [{ nodeId: 'a', address: 'http://10.0.0.1:8090' }, { nodeId: 'b', address: 'http://10.0.0.2:8090' }] }], hopKeys: keys });
  const key = Array.from({ length: 100 }, (_, i) => `ep\x1f/${i}`).find((k) => d.target('shield-r', k)!.nodeId === 'a')!;
  d.markDown('a');
  t.equal(d.target('shield-r', key)!.nodeId, 'b', 'the other node of the region');
  d.markDown('b');
  t.equal(d.target('shield-r', key), null, 'none left: the origin');
  d.markDown('a', Date.now() - 31_000);
  t.equal(d.target('shield-r', key)!.nodeId, 'a', 'tried again after a while');
});
