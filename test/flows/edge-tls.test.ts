// HTTPS at the edge end to end (issue 23 item 1): a control plane (in this
// process) publishes an endpoint with two custom domains carrying their own
// certificates; a real edge-agent process connected to it, with the wildcard
// *.CDN_DOMAIN as its default certificate, serves each name with the right
// certificate by SNI. A certificate replaced through the API is served on the
// next handshake after the publish, without a restart, while a connection
// opened before keeps its certificate and keeps being served.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { tlsConnect } from '../../edge-agent/test/tls-client.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { cdnCallers, mustCaller } from '../support/cdn.ts';
import { makeLeaf, trustedTestCa } from '../support/certificates.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import { startCountingOrigin } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';

const AGENT_TOKEN = 'agt_edge_tls_flow_test_0123456789';

t.test('SNI picks each custom domain\'s certificate and the CDN hostname\'s wildcard; a replaced certificate is served on the next handshake while an open connection keeps its own', { timeout: 120_000 }, async (t) => {
  const { ca, env: trustsCa } = await trustedTestCa('Edge TLS Flow CA');
  const cp = await startTestControlPlane(t, {
    env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa },
    services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) },
  });
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  const origin = await startCountingOrigin(t);
  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'tls origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'tls', default_origin_id: originRecord.id });
  const custom = async (hostname: string) => {
    const leaf = await makeLeaf(ca, [hostname]);
    return { certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem };
  };
  const shop = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, { hostname: 'shop.example.org', certificate_source: 'custom', custom_certificate: await custom('shop.example.org') });
  await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, { hostname: 'media.example.org', certificate_source: 'custom', custom_certificate: await custom('media.example.org') });
  await must('POST', '/v1/cdn/config/publish', { description: 'two custom domains' });

  const dir = mkdtempSync(join(tmpdir(), 'sp-edge-tls-'));
  const wildcard = await makeLeaf(ca, ['*.edge.example.net']);
  writeFileSync(join(dir, 'cdn.pem'), wildcard.certPem + ca.pem);
  writeFileSync(join(dir, 'cdn.key'), wildcard.keyPem, { mode: 0o600 });
  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: join(dir, 'data'), REGION: 'test', NODE_HOSTNAME: 'tls-agent',
    SHUTDOWN_TIMEOUT_MS: '1000', TLS_CERT_FILE: join(dir, 'cdn.pem'), TLS_KEY_FILE: join(dir, 'cdn.key'),
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);
  await eventually(async () => {
    try {
      const c = await tlsConnect({ port: httpsPort, servername: 'shop.example.org' });
      c.close();
      return true;
    } catch {
      return false;
    }
  }, 'the agent has the configuration');

  for (const [name, names] of [['shop.example.org', ['shop.example.org']], ['media.example.org', ['media.example.org']], [endpoint.hostname, ['*.edge.example.net']]]) {
    const c = await tlsConnect({ port: httpsPort, servername: name as string, ca: ca.pem });
    t.same(c.names, names, `${name}: its certificate`);
    const res = await c.get(name as string, '/hello');
    t.equal(res.status, 200, `${name}: served`);
    t.match(res.body, /^\/hello #/);
    c.close();
  }

  const before = await tlsConnect({ port: httpsPort, servername: 'shop.example.org', ca: ca.pem });
  t.equal((await before.get('shop.example.org', '/kept')).status, 200);
  const replaced = await must('PUT', `/v1/cdn/endpoints/${endpoint.id}/domains/${shop.id}/certificate`, await custom('shop.example.org'));
  t.equal(replaced.certificate_status, 'active');
  await must('POST', '/v1/cdn/config/publish', { description: 'shop\'s certificate replaced' });
  let after = before;
  await eventually(async () => {
    after = await tlsConnect({ port: httpsPort, servername: 'shop.example.org', ca: ca.pem });
    if (after.fingerprint !== before.fingerprint) return true;
    after.close();
    return false;
  }, 'a new handshake gets the new certificate');
  t.not(after.fingerprint, before.fingerprint, 'the replaced certificate is served');
  t.equal((await after.get('shop.example.org', '/new')).status, 200);
  t.equal((await before.get('shop.example.org', '/kept')).status, 200, 'the connection opened before is still open and served, with its certificate');
  t.notOk(before.socket.destroyed);
  before.close();
  after.close();
  t.match(agent.logs.join('\n'), /"https_port":\d+/, 'one agent process all along (no restart)');
  t.equal(agent.child.exitCode, null);
});
