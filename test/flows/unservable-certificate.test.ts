// A replacement certificate the edge cannot serve is refused at write time, end to end: a control plane (in this
// process) and a real edge-agent process serve a custom domain over HTTPS; a PUT of an RSA-1024, secp256k1 or
// brainpool certificate is 422 with the reason and changes nothing, and after a later publish reaches the agent
// the domain still serves HTTPS with its old certificate.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { tlsConnect } from '../../edge-agent/test/tls-client.ts';
import { query, RELAXED_LIMITS } from '../support/auth.ts';
import { caller, cdnCallers, mustCaller } from '../support/cdn.ts';
import { makeLeaf, makeLeafOfKeyType, trustedTestCa } from '../support/certificates.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import { startCountingOrigin } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';

const AGENT_TOKEN = 'agt_unservable_certificate_0123456789';

t.test('regression: replacing a working domain\'s certificate with one the edge cannot serve is 422, and the domain keeps serving HTTPS with the old one', { timeout: 120_000 }, async (t) => {
  const { ca, env: trustsCa } = await trustedTestCa('Unservable Flow CA');
  const cp = await startTestControlPlane(t, {
    env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa },
    services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) },
  });
  const send = caller(cp);
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  const origin = await startCountingOrigin(t);
  const originRecord = await must('POST', '/v1/cdn/origins', { name: 'unservable origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'unservable', default_origin_id: originRecord.id });
  const pair = (leaf: { certPem: string; keyPem: string }) => ({ certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem });
  const base = `/v1/cdn/endpoints/${endpoint.id}/domains`;
  const shop = await must('POST', base, { hostname: 'shop.example.org', certificate_source: 'custom', custom_certificate: pair(await makeLeaf(ca, ['shop.example.org'])) });
  await must('POST', '/v1/cdn/config/publish', { description: 'shop' });

  const dir = mkdtempSync(join(tmpdir(), 'sp-unservable-'));
  const agent = await startAgentProcess({
    CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}`, AGENT_TOKEN, DATA_DIR: join(dir, 'data'), REGION: 'test', NODE_HOSTNAME: 'unservable-agent',
    SHUTDOWN_TIMEOUT_MS: '1000',
  });
  t.teardown(() => { agent.child.kill('SIGKILL'); });
  const httpsPort = Number(/"https_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"https_port"'))!)![1]);
  const handshake = async (servername: string) => {
    try {
      const c = await tlsConnect({ port: httpsPort, servername, ca: ca.pem });
      return c;
    } catch {
      return undefined;
    }
  };
  await eventually(async () => { const c = await handshake('shop.example.org'); c?.close(); return c !== undefined; }, 'the agent serves shop');
  const served = (await handshake('shop.example.org'))!;
  const fingerprint = served.fingerprint;
  served.close();

  const stored = async () => query(cp, `select certificate_pem, private_key_sealed, certificate_fingerprint, previous_certificate_pem, version from cdn_custom_domain where id = ?`, [shop.id]);
  const before = await stored();
  for (const [type, reason] of [['rsa-1024', /RSA key of 1024 bits/], ['secp256k1', /secp256k1 is not served/], ['brainpoolP256r1', /brainpoolP256r1 is not served/]] as const) {
    const res = await send(admin, 'PUT', `${base}/${shop.id}/certificate`, pair(await makeLeafOfKeyType(ca, ['shop.example.org'], type)));
    t.equal(res.status, 422, `${type}: ${res.text}`);
    t.match(res.body, { code: 'INVALID_CONFIGURATION', errors: [{ field: 'certificate_pem', message: reason }] });
  }
  t.same(await stored(), before, 'nothing changed');
  t.match((await send(admin, 'GET', `${base}/${shop.id}`)).body, { certificate_status: 'active' });

  // A later configuration reaches the agent (a second domain), and shop is still served with its certificate.
  await must('POST', base, { hostname: 'media.example.org', certificate_source: 'custom', custom_certificate: pair(await makeLeaf(ca, ['media.example.org'])) });
  await must('POST', '/v1/cdn/config/publish', { description: 'media' });
  await eventually(async () => { const c = await handshake('media.example.org'); c?.close(); return c !== undefined; }, 'the agent applied the later configuration');
  const after = (await handshake('shop.example.org'))!;
  t.equal(after.fingerprint, fingerprint, 'the old certificate is still served');
  t.same(after.names, ['shop.example.org']);
  t.equal((await after.get('shop.example.org', '/still')).status, 200, 'over HTTPS');
  after.close();
});
