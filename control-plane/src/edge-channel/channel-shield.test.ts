// Origin shield on the control channel (issue 23 item 5), with simulated
// agents on the real server: a node's shield address and region names come
// in Hello (malformed ones refuse the stream), every stream gets the shield
// map (each region's online shield nodes and the hop keys) after Welcome and
// again when a shield node comes or goes, and GET /v1/cdn/shield-regions lists
// the regions with shield nodes: named and placed as their nodes say,
// available while one is online and the agents of other regions reach it, the
// latency hint the median of what nodes of other regions measured.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { TestConfigSource, agentConnector, testTokens } from '../../../test/support/edge-channel.ts';
import type { ShieldMap } from '../../../shared/gen/edge/v1/control_pb.ts';

const cp = await startTestControlPlane(t, {
  env: { ...RELAXED_LIMITS, CDN_PUBLISH_MODE: 'manual' },
  services: { edgeConfig: new TestConfigSource(), edgeAgentTokens: testTokens({ agt_shield: randomUUID() }) },
});
const port = cp.app.edgeChannel!.port;
await cp.app.edgeChannel!.hub.subscribed;
const send = caller(cp);
const { viewer, subscriber } = await cdnCallers(cp);
const { connect, raw } = agentConnector(t, port, 'agt_shield');
const regionsOf = (map: ShieldMap) => map.regions.map((r) => [r.region, r.nodes.map((n) => n.address)]);

t.test('a malformed shield address or region field in Hello refuses the stream', async (t) => {
  for (const [fields, field] of [
    [{ shieldAddress: 'ftp://10.0.0.1:21' }, 'shield_address'], [{ shieldAddress: 'http://10.0.0.1:8090/path' }, 'shield_address'],
    [{ shieldAddress: 'http://user:pw@10.0.0.1:8090' }, 'shield_address'], [{ regionCountryCode: 'ire' }, 'region_country_code'],
    [{ regionName: 'x'.repeat(101) }, 'region_name'],
  ] as const) {
    const agent = raw();
    agent.hello(fields);
    const status = await agent.status;
    t.equal(status.code, GrpcStatus.INVALID_ARGUMENT, JSON.stringify(fields));
    t.match(status.details, field);
  }
});

t.test('the shield map after Welcome and when shield nodes come and go; the shield-regions list', async (t) => {
  const { agent: eu } = await connect({ region: 'eu-west', shieldAddress: 'http://10.1.0.1:8090', regionName: 'Europe (Dublin)', regionCountryCode: 'IE', regionCity: 'Dublin' });
  const { agent: edge } = await connect({ region: 'us-east' });
  const first = await edge.next('shieldMap');
  t.same(regionsOf(first), [['eu-west', ['http://10.1.0.1:8090']]], 'the one shield node, after Welcome');
  t.equal(first.hopKeys.length, 2, 'today\'s key and yesterday\'s');
  t.ok(first.hopKeys.every((k) => k.length === 32));
  t.same(regionsOf(await eu.next('shieldMap')), [['eu-west', ['http://10.1.0.1:8090']]], 'a shield node gets the map too');

  const { agent: us } = await connect({ region: 'us-east', shieldAddress: 'https://us.shield.example:8443', regionName: 'US East' });
  const second = await edge.next('shieldMap');
  t.same(regionsOf(second), [['eu-west', ['http://10.1.0.1:8090']], ['us-east', ['https://us.shield.example:8443']]], 'a new shield node reaches every stream within a tick');
  t.same(second.hopKeys, first.hopKeys, 'the same keys within the day');

  edge.heartbeat({ status: 'ok', shieldLatencies: [{ region: 'eu-west', latencyMs: 40 }, { region: 'us-east', latencyMs: 1 }, { region: 'Bad Region', latencyMs: 5 }] });
  us.heartbeat({ status: 'ok', shieldLatencies: [{ region: 'eu-west', latencyMs: 80 }] });
  eu.heartbeat({ status: 'ok', shieldLatencies: [{ region: 'us-east', latencyMs: 70 }, { region: 'eu-west', latencyMs: 0 }] });
  const expected = [
    { id: 'eu-west', name: 'Europe (Dublin)', location: { country_code: 'IE', city: 'Dublin' }, available: true, latency_hint_ms: 60 },
    { id: 'us-east', name: 'US East', location: { country_code: null, city: null }, available: true, latency_hint_ms: 70 },
  ];
  await eventually(async () => JSON.stringify((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data) === JSON.stringify(expected), 'the list');
  t.same((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body, { data: expected },
    'eu-west: the median of 40 and 80 (its own node\'s 0 not counted); us-east: 70 (a node\'s measure of its own region not counted)');

  // Every node of another region that measured eu-west found its shield refusing or silent: unavailable, though online.
  edge.heartbeat({ status: 'ok', shieldLatencies: [{ region: 'us-east', latencyMs: 1 }], unreachableShieldRegions: ['eu-west', 'Bad Region'] });
  us.heartbeat({ status: 'ok', unreachableShieldRegions: ['eu-west'] });
  await eventually(async () => (await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data[0]?.available === false, 'eu-west unavailable while no agent reaches it');
  t.match((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data, [{ id: 'eu-west', available: false, latency_hint_ms: null }, { id: 'us-east', available: true, latency_hint_ms: 70 }]);
  us.heartbeat({ status: 'ok', shieldLatencies: [{ region: 'eu-west', latencyMs: 80 }] });
  await eventually(async () => (await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data[0]?.available === true, 'eu-west available once one agent reaches it');
  t.equal((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data[0].latency_hint_ms, 80, 'the hint from the agent that reached it');

  us.close();
  t.same(regionsOf(await edge.next('shieldMap')), [['eu-west', ['http://10.1.0.1:8090']]], 'a shield node gone: the map without it');
  await eventually(async () => (await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data[1]?.available === false, 'us-east unavailable');
  t.equal((await send(viewer, 'GET', '/v1/cdn/shield-regions')).body.data.length, 2, 'still listed (an endpoint may keep naming it)');
  t.equal((await send(subscriber, 'GET', '/v1/cdn/shield-regions')).status, 403, 'CDN roles only');
});
