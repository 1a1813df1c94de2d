import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { ConfigError, flagsToEnv, loadConfig } from './config.ts';

t.test('defaults give the embedded development setup', async (t) => {
  const c = loadConfig({});
  t.equal(c.PORT, 8080);
  t.equal(c.GRPC_PORT, 8081);
  t.equal(c.DATABASE_URL, undefined, 'embedded PGlite');
  t.equal(c.REDIS_URL, undefined, 'in-process store');
  t.equal(c.publicUrl, 'http://localhost:8080');
  t.equal(c.CDN_PUBLISH_MODE, 'auto');
});

t.test('a wrong value stops with one line naming the variable', async (t) => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ PORT: 'eighty' }, /^PORT: /],
    [{ PORT: '70000' }, /^PORT: /],
    [{ DATABASE_URL: 'mysql://x' }, /^DATABASE_URL: /],
    [{ REDIS_URL: 'not a url' }, /^REDIS_URL: /],
    [{ LOG_LEVEL: 'loud' }, /^LOG_LEVEL: .*got "loud"/],
    [{ CDN_PUBLISH_MODE: 'sometimes' }, /^CDN_PUBLISH_MODE: /],
    [{ SECRETS_KEY: 'short' }, /^SECRETS_KEY: /],
  ];
  for (const [env, pattern] of cases) {
    const error = t.throws(() => loadConfig(env)) as Error;
    t.ok(error instanceof ConfigError);
    t.match(error.message, pattern);
    t.notMatch(error.message, /\n/, 'one line');
  }
  const secret = t.throws(() => loadConfig({ SECRETS_KEY: 'short-secret' })) as Error;
  t.notMatch(secret.message, /short-secret/, 'secret values are not echoed');
});

t.test('flags override environment variables', async (t) => {
  t.same(flagsToEnv(['--port', '9000', '--grpc-port=9001']), { PORT: '9000', GRPC_PORT: '9001' });
  const c = loadConfig({ PORT: '1' }, ['--port', '9000']);
  t.equal(c.PORT, 9000);
  t.throws(() => flagsToEnv(['--port']), /PORT: missing value/);
});

t.test('a flag naming no variable, or a stray argument, is refused with one line (it used to be ignored)', async (t) => {
  t.throws(() => loadConfig({}, ['--prot', '9000']), /^unknown flag --prot$/);
  t.throws(() => loadConfig({}, ['9000']), /unexpected argument "9000"/);
  t.equal(loadConfig({}, ['--data-dir', '/tmp/x', '--app-url=https://app.example.com']).DATA_DIR, '/tmp/x');
});

t.test('links in e-mails point at APP_URL when set, otherwise at PUBLIC_URL', async (t) => {
  t.equal(loadConfig({ PORT: '9000' }).linkBaseUrl, 'http://localhost:9000');
  t.equal(loadConfig({ PUBLIC_URL: 'https://api.example.com/' }).linkBaseUrl, 'https://api.example.com');
  const c = loadConfig({ PUBLIC_URL: 'https://api.example.com', APP_URL: 'https://app.example.com/' });
  t.equal(c.linkBaseUrl, 'https://app.example.com');
  t.equal(c.publicUrl, 'https://api.example.com', 'the token issuer stays PUBLIC_URL');
  t.throws(() => loadConfig({ APP_URL: 'ftp://x' }), /^APP_URL: /);
});

t.test('empty variables count as unset', async (t) => {
  t.equal(loadConfig({ DATABASE_URL: '' }).DATABASE_URL, undefined);
});

t.test('ACME: the directory URL, then the contact and CA bundle only beside it; the bundle must be a readable PEM file', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/acme-config-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const bundle = `${dir}/ca.pem`;
  writeFileSync(bundle, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  writeFileSync(`${dir}/not.pem`, 'hello');
  t.equal(loadConfig({}).ACME_DIRECTORY_URL, undefined, 'unset: the internal CA');
  const acme = loadConfig({ ACME_DIRECTORY_URL: 'https://acme.example.net/dir', ACME_EMAIL: 'certs@example.com', ACME_CA_BUNDLE: bundle });
  t.match(acme, { ACME_DIRECTORY_URL: 'https://acme.example.net/dir', ACME_EMAIL: 'certs@example.com', ACME_CA_BUNDLE: bundle });
  t.throws(() => loadConfig({ ACME_DIRECTORY_URL: 'ftp://acme.example.net/dir' }), /^ACME_DIRECTORY_URL: /);
  t.throws(() => loadConfig({ ACME_DIRECTORY_URL: 'https://acme.example.net/dir', ACME_EMAIL: 'nope' }), /^ACME_EMAIL: /);
  t.throws(() => loadConfig({ ACME_DIRECTORY_URL: 'https://acme.example.net/dir', ACME_CA_BUNDLE: `${dir}/missing.pem` }), /^ACME_CA_BUNDLE: Must be a readable file/);
  t.throws(() => loadConfig({ ACME_DIRECTORY_URL: 'https://acme.example.net/dir', ACME_CA_BUNDLE: `${dir}/not.pem` }), /^ACME_CA_BUNDLE: Must be a readable file/);
  t.throws(() => loadConfig({ ACME_EMAIL: 'certs@example.com' }), /^ACME_EMAIL: only with ACME_DIRECTORY_URL/);
  t.throws(() => loadConfig({ ACME_CA_BUNDLE: bundle }), /^ACME_CA_BUNDLE: only with ACME_DIRECTORY_URL/);
});

t.test('CUSTOM_CERT_CA_FILE: a readable file of PEM certificates, or unset', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/custom-ca-config-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(`${dir}/ca.pem`, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  writeFileSync(`${dir}/not.pem`, 'hello');
  t.equal(loadConfig({}).CUSTOM_CERT_CA_FILE, undefined);
  t.equal(loadConfig({ CUSTOM_CERT_CA_FILE: `${dir}/ca.pem` }).CUSTOM_CERT_CA_FILE, `${dir}/ca.pem`);
  t.throws(() => loadConfig({ CUSTOM_CERT_CA_FILE: `${dir}/missing.pem` }), /^CUSTOM_CERT_CA_FILE: Must be a readable file/);
  t.throws(() => loadConfig({ CUSTOM_CERT_CA_FILE: `${dir}/not.pem` }), /^CUSTOM_CERT_CA_FILE: Must be a readable file/);
});

t.test('control channel: TLS needs a readable certificate chain and key together; heartbeat interval bounds', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/grpc-config-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cert = `${dir}/cert.pem`;
  const key = `${dir}/key.pem`;
  writeFileSync(cert, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  writeFileSync(key, '-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n');
  t.equal(loadConfig({}).GRPC_TLS_CERT_FILE, undefined, 'unset: h2c');
  t.match(loadConfig({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: key }), { GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: key });
  t.throws(() => loadConfig({ GRPC_TLS_CERT_FILE: cert }), /^GRPC_TLS_KEY_FILE: required with GRPC_TLS_CERT_FILE/);
  t.throws(() => loadConfig({ GRPC_TLS_KEY_FILE: key }), /^GRPC_TLS_CERT_FILE: required with GRPC_TLS_KEY_FILE/);
  t.throws(() => loadConfig({ GRPC_TLS_CERT_FILE: key, GRPC_TLS_KEY_FILE: key }), /^GRPC_TLS_CERT_FILE: Must be a readable file/);
  t.throws(() => loadConfig({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: `${dir}/missing.pem` }), /^GRPC_TLS_KEY_FILE: Must be a readable file/);
  t.equal(loadConfig({}).EDGE_HEARTBEAT_INTERVAL_MS, 5000);
  t.throws(() => loadConfig({ EDGE_HEARTBEAT_INTERVAL_MS: '10' }), /^EDGE_HEARTBEAT_INTERVAL_MS: /);
});
