// The control channel on the embedded database (PGlite, one connection) and
// the in-process store, as `npm start` runs it: an agent registers, gets a
// purge, and its ack completes it.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { RELAXED_LIMITS } from '../../../test/support/auth.ts';
import { caller, cdnCallers, makeEndpoint } from '../../../test/support/cdn.ts';
import { startTestControlPlane } from '../../../test/support/control-plane.ts';
import { eventually } from '../../../test/support/eventually.ts';
import { TestConfigSource, agentConnector, testTokens } from '../../../test/support/edge-channel.ts';

t.test('embedded PGlite and the in-process store: register, purge, ack, completed', async (t) => {
  const cp = await startTestControlPlane(t, {
    embedded: true,
    env: { ...RELAXED_LIMITS, REDIS_URL: '', CDN_PUBLISH_MODE: 'manual' },
    services: { edgeConfig: new TestConfigSource(), edgeAgentTokens: testTokens({ agt_good: randomUUID() }) },
  });
  t.equal(cp.database.real, false, 'PGlite, not the PostgreSQL server');
  t.equal(cp.app.store.kind, 'memory');
  await cp.app.edgeChannel!.hub.subscribed;
  const { connect } = agentConnector(t, cp.app.edgeChannel!.port, 'agt_good');
  const { agent } = await connect({ hostname: 'edge-embedded' });
  const send = caller(cp);
  const { admin } = await cdnCallers(cp);
  const { endpoint } = await makeEndpoint(cp, admin);
  const purge = (await send(admin, 'POST', `/v1/cdn/endpoints/${endpoint.id}/purge`, { purge_type: 'all' })).body;
  const pushed = await agent.next('purge');
  t.equal(pushed.purgeId, purge.id);
  agent.ackPurge(pushed);
  await eventually(async () => (await send(admin, 'GET', `/v1/cdn/purge/${purge.id}`)).body.status === 'completed', 'completed');
  const nodes = await send(admin, 'GET', '/v1/cdn/edge-nodes');
  t.match(nodes.body.data, [{ id: agent.nodeId, status: 'online', hostname: 'edge-embedded' }]);
});
