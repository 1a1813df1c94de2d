// Regression (issue 23 item 1): the configuration an edge agent kept in
// DATA_DIR held signing-key secrets, certificate private keys, log-drain
// credentials and origin header values in clear. With a real agent process
// connected to a control plane (in this process): none of those secrets (nor
// the SHA-256 of any resource, which could confirm a guessed secret) appears
// in any file under DATA_DIR; the agent restarted with the control plane
// unreachable still serves that configuration from disk (a signed URL made
// with the restored secret is served); with another agent token the sealed
// files cannot be opened and it starts without them.
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { StateKey } from '../../edge-agent/src/control/sealing.ts';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { startAgentProcess } from '../../edge-agent/test/helpers.ts';
import { RELAXED_LIMITS } from '../support/auth.ts';
import { cdnCallers, mustCaller } from '../support/cdn.ts';
import { makeLeaf, trustedTestCa } from '../support/certificates.ts';
import { startTestControlPlane } from '../support/control-plane.ts';
import { testTokens } from '../support/edge-channel.ts';
import { agentHealth, startCountingOrigin, viewerGet } from '../support/edge-deployment.ts';
import { eventually } from '../support/eventually.ts';

const AGENT_TOKEN = 'agt_secrets_at_rest_test_0123456789';
const OTHER_TOKEN = 'agt_secrets_at_rest_other_token_98765';

function filesUnder(dir: string): string[] {
  // A file being written may be renamed away meanwhile.
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).map((f) => join(dir, f)).filter((f) => statSync(f, { throwIfNoEntry: false })?.isFile() === true);
}

t.test('regression: secrets in the stored configuration are sealed on the agent\'s disk, and the agent still restarts from it with the control plane down', { timeout: 120_000 }, async (t) => {
  const { ca, env: trustsCa } = await trustedTestCa('Secrets Test CA');
  const cp = await startTestControlPlane(t, {
    env: { ...RELAXED_LIMITS, CDN_DOMAIN: 'edge.example.net', ...trustsCa },
    services: { edgeAgentTokens: testTokens({ [AGENT_TOKEN]: randomUUID() }) },
  });
  const { admin } = await cdnCallers(cp);
  const must = mustCaller(cp, admin);
  const origin = await startCountingOrigin(t);
  const headerSecret = `origin-header-secret-${randomUUID()}`;
  const drainSecret = `Bearer drain-credential-${randomUUID()}`;
  const originRecord = await must('POST', '/v1/cdn/origins', {
    name: 'secret origin', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, custom_headers: { 'x-origin-auth': headerSecret },
  });
  const endpoint = await must('POST', '/v1/cdn/endpoints', { name: 'secrets', default_origin_id: originRecord.id });
  const key = await must('POST', `/v1/cdn/endpoints/${endpoint.id}/signing-keys`, { name: 'player' });
  await must('PATCH', `/v1/cdn/endpoints/${endpoint.id}`, { token_auth_enabled: true });
  const leaf = await makeLeaf(ca, ['secret.example.org']);
  await must('POST', `/v1/cdn/endpoints/${endpoint.id}/domains`, {
    hostname: 'secret.example.org', certificate_source: 'custom', custom_certificate: { certificate_pem: leaf.certPem + ca.pem, private_key_pem: leaf.keyPem },
  });
  await must('POST', '/v1/cdn/log-drains', {
    name: 'drain', destination_type: 'http', destination_config: { url: 'http://127.0.0.1:9/in', auth_header: drainSecret, allow_private_network: true },
  });
  const published = await must('POST', '/v1/cdn/config/publish', { description: 'secrets' });

  const dataDir = mkdtempSync(join(tmpdir(), 'sp-secrets-agent-'));
  const env = { AGENT_TOKEN, DATA_DIR: dataDir, REGION: 'test', NODE_HOSTNAME: 'secrets-agent', SHUTDOWN_TIMEOUT_MS: '1000' };
  const first = await startAgentProcess({ ...env, CONTROL_PLANE_URL: `grpc://127.0.0.1:${cp.app.edgeChannel!.port}` });
  await eventually(async () => (await agentHealth(first)).config_version === published.version_number, 'the agent applied the configuration');
  await eventually(async () => filesUnder(dataDir).some((f) => f.endsWith('manifest.json')), 'the configuration is on disk');
  // Its writes are asynchronous: stop the agent cleanly so everything it keeps is written.
  first.child.kill('SIGTERM');
  await new Promise((r) => first.child.once('exit', r));

  const keyBody = leaf.keyPem.split('\n').filter((l) => l && !l.startsWith('-----')).join('');
  const secrets = { 'origin header value': headerSecret, 'log drain credential': drainSecret, 'signing key secret': key.secret as string, 'private key': keyBody.slice(0, 40) };
  const files = filesUnder(dataDir);
  t.ok(files.some((f) => f.includes(join('config', 'resources'))), `${files.length} files, resource bodies among them`);
  for (const file of files) {
    const text = readFileSync(file).toString('latin1');
    for (const [what, secret] of Object.entries(secrets)) t.notOk(text.includes(secret), `no ${what} in ${file.slice(dataDir.length)}`);
  }
  const manifestText = files.map((f) => readFileSync(f).toString('latin1')).join('\n');
  t.notMatch(manifestText, /"endpoint\/[0-9a-f-]{36}"/, 'the manifest (keys and digests) is sealed too');
  // With the token's key every body opens, and no file is named by its body's SHA-256 (which would confirm a guessed secret).
  const stateKey = StateKey.fromAgentToken(AGENT_TOKEN);
  const bodies = files.filter((f) => f.includes(join('config', 'resources')));
  for (const file of bodies) {
    const name = file.slice(file.lastIndexOf('/') + 1, -'.json'.length);
    const manifest = JSON.parse(stateKey.open(readFileSync(join(dataDir, 'config', 'manifest.json')), 'manifest').toString()) as { resources: [string, number, string][] };
    const entry = manifest.resources.find(([, , sha]) => stateKey.name(sha) === name);
    t.ok(entry, `${name}: named in the manifest`);
    const body = stateKey.open(readFileSync(file), `resource ${entry![2]}`);
    t.equal(createHash('sha256').update(body).digest('hex'), entry![2], 'it opens to the body the manifest names');
    t.not(name, entry![2], 'its name is not its SHA-256');
  }

  // Restarted with the control plane unreachable: the sealed configuration serves.
  const down = await startAgentProcess({ ...env, CONTROL_PLANE_URL: 'grpc://127.0.0.1:9' });
  t.teardown(() => { down.child.kill('SIGKILL'); });
  t.equal((await agentHealth(down)).config_version, published.version_number, 'restored from disk');
  const signed = signPath({ path: '/restored', expires: Math.floor(Date.now() / 1000) + 600, secret: key.secret as string });
  const served = await viewerGet(down.port, endpoint.hostname, signed);
  t.equal(served.status, 200, 'a URL signed with the restored secret is served');
  t.equal((await viewerGet(down.port, endpoint.hostname, '/restored')).status, 403, 'an unsigned one is refused: the endpoint\'s policies came back too');
  down.child.kill('SIGKILL');
  await new Promise((r) => down.child.once('exit', r));

  // Another token: the files cannot be opened, the agent starts without them.
  const other = await startAgentProcess({ ...env, AGENT_TOKEN: OTHER_TOKEN, CONTROL_PLANE_URL: 'grpc://127.0.0.1:9' });
  t.teardown(() => { other.child.kill('SIGKILL'); });
  t.equal((await agentHealth(other)).config_version, 0, 'nothing restored with another token');
  t.match(other.logs.join('\n'), /cannot be opened with this agent token/);
  t.equal((await viewerGet(other.port, endpoint.hostname, '/x')).status, 421);
});
