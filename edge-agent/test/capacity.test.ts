// MAX_ENDPOINTS: a node sized for fewer endpoints than a configuration holds
// refuses that configuration whole, from a file or from the control stream,
// and keeps serving the one it had.
import t from 'tap';
import { splitSnapshot, configDigest } from '../../shared/src/config/resources.ts';
import { ConfigRefusedError } from '../src/agent.ts';
import { snapshotFor, startAgent, startOrigin } from './helpers.ts';

t.test('a configuration with more endpoints than MAX_ENDPOINTS is refused and the previous one keeps serving', async (t) => {
  const origin = await startOrigin((_req, res) => res.end('from origin'));
  t.teardown(() => origin.close());
  const one = snapshotFor(origin.port);
  const agent = await startAgent(one, { maxEndpoints: 1 });
  t.teardown(() => agent.close());
  t.equal((await agent.get('/x')).body, 'from origin');

  const two = { ...one, version: 2, endpoints: [...one.endpoints, { ...one.endpoints[0]!, id: 'ep2', hostname: 'second.test' }] };
  t.throws(() => agent.agent.applyConfig(two), ConfigRefusedError, 'from a file');
  const resources = splitSnapshot(two as never);
  t.throws(() => agent.agent.applyConfigPush({
    version: 2, full: true, baseVersion: 0, removed: [],
    resources: resources.map((r) => ({ key: r.key, version: 2, body: r.body, sha256: r.sha256 })),
    digest: configDigest(resources.map((r) => [r.key, r.sha256])), resourceCount: resources.length,
  }), /configuration refused: 2 endpoints exceed this node's limit of 1 \(MAX_ENDPOINTS\)/, 'from the control stream, with the reason the nack carries');
  t.equal(agent.agent.configVersion, 1, 'the previous version is in force');
  t.equal((await agent.get('/x')).body, 'from origin', 'and serves');
});
