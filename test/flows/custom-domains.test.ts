// Custom hostnames are served only once validated (issue 21 item 7), with a
// real edge-agent process connected to a control plane (in this process, so
// the test answers its DNS look-ups) and a real origin: a custom domain whose
// certificate covers its name is served at once; a managed domain waiting for
// validation is not (421, as an unknown name), though it used to be served the
// moment it was created; once its DNS records are found and its certificate
// issued, the next publish makes the agent serve it.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { cdnCallers, mustCaller } from '../support/cdn.ts';
import { makeLeaf, trustedTestCa } from '../support/certificates.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { startCountingOrigin, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';
import { testTokens } from '../support/edge-channel.ts';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const AGENT_TOKEN = 'agt_custom_domains_test_0123456789';

t.test('regression: a managed domain waiting for validation is not served; a validated one is, and the managed one once its certificate is issued', { timeout: 120_000 }, async (t) => {
  const { ca, env: trustsCa } = await trustedTestCa('Domains Test CA');
  const cp = await startTestControlPlane(t, {
    env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa },
    services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) },
  });
  const cnames: Record<string, string[]> = {};
  const txts: Record<string, string[]> = {};
  cp.app.cdnDomainResolver = { cname: async (name) => cnames[name] ?? [], txt: async (name) => txts[name] ?? [] };
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);

  const origin = await startCountingOrigin(t);
  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'domains origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'domains', default_origin_id: originRecord.id });
  const leaf = await makeLeaf(ca, ['valid.example.org']);
  const custom = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, {
    hostname: 'valid.example.org', certificate_source: 'custom', custom_certificate: { certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem },
  });
  t.equal(custom.certificate_status, 'active');
  const managed = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, { hostname: 'pending.example.org', certificate_source: 'managed' });
  t.equal(managed.certificate_status, 'pending_validation');
  await must('POST', '/v1/cdn/config/publish', { description: 'two domains, one validated' });

  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: mkdtempSync(join(tmpdir(), 'sp-domains-agent-')),
    REGION: 'test', NODE_HOSTNAME: 'domains-agent', SHUTDOWN_TIMEOUT_MS: '1000',
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  await eventually(async () => (await viewerGet(agent.port, endpoint.hostname, '/x')).status === 200, 'the agent serves the endpoint');

  t.equal((await viewerGet(agent.port, 'valid.example.org', '/x')).status, 200, 'the custom domain, its certificate checked, is served');
  const pending = await viewerGet(agent.port, 'pending.example.org', '/x');
  t.equal(pending.status, 421, 'the managed domain waiting for validation is not served by the agent');

  cnames['pending.example.org'] = [endpoint.hostname];
  txts['_acme-challenge.pending.example.org'] = [managed.dns_validation.acme_challenge_value];
  const issued = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains/${managed.id}/retry-validation`);
  t.equal(issued.certificate_status, 'active');
  await must('POST', '/v1/cdn/config/publish', { description: 'the managed domain validated' });
  await eventually(async () => (await viewerGet(agent.port, 'pending.example.org', '/x')).status === 200, 'validated, it is served');
});
