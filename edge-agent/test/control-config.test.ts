// Settings of the control stream and the node identity kept in DATA_DIR.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config.ts';
import { loadOrCreateNodeId } from '../src/control/node-identity.ts';

const TOKEN = 'a-token-of-sufficient-length';

t.test('control-plane settings are checked together', async (t) => {
  const ok = loadConfig([], { CONTROL_PLANE_URL: 'grpcs://cp.example.com:8443', AGENT_TOKEN: TOKEN, CONTROL_PLANE_CA_FILE: '/etc/ca.pem', NODE_HOSTNAME: 'edge-1.fra' });
  t.equal(ok.CONTROL_PLANE_CA_FILE, '/etc/ca.pem');
  t.equal(ok.NODE_HOSTNAME, 'edge-1.fra');
  t.throws(() => loadConfig([], { CONTROL_PLANE_URL: 'grpc://cp:8081' }), new ConfigError('AGENT_TOKEN: required when CONTROL_PLANE_URL is set'));
  t.throws(() => loadConfig([], { CONTROL_PLANE_URL: 'grpc://cp:8081', AGENT_TOKEN: TOKEN, CONFIG_FILE: 'x.json' }), /^CONFIG_FILE: cannot be used with CONTROL_PLANE_URL/);
  t.throws(() => loadConfig([], { CONTROL_PLANE_URL: 'grpc://cp:8081', AGENT_TOKEN: TOKEN, CONTROL_PLANE_CA_FILE: '/etc/ca.pem' }), /^CONTROL_PLANE_CA_FILE: only used with a grpcs/);
  t.throws(() => loadConfig([], { NODE_HOSTNAME: 'has space' }), /^NODE_HOSTNAME: /);
  t.throws(() => loadConfig([], { CONTROL_PLANE_URL: 'ftp://cp:21', AGENT_TOKEN: TOKEN }), /^CONTROL_PLANE_URL: /);
  try {
    loadConfig([], { CONTROL_PLANE_URL: 'grpc://cp:8081', AGENT_TOKEN: 'short' });
    t.fail('short token accepted');
  } catch (err) {
    t.match((err as Error).message, /^AGENT_TOKEN: /);
    t.notMatch((err as Error).message, 'short', 'the token is not echoed');
  }
});

t.test('the node id is made once and kept; an unreadable file is replaced', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'edge-node-id-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = loadOrCreateNodeId(join(dir, 'data'));
  t.equal(first.created, true);
  t.match(first.nodeId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  t.same(loadOrCreateNodeId(join(dir, 'data')), { nodeId: first.nodeId, created: false }, 'the same id on the next start');
  t.equal(readFileSync(join(dir, 'data', 'node-id'), 'utf8'), `${first.nodeId}\n`);
  writeFileSync(join(dir, 'data', 'node-id'), 'garbage');
  const replaced = loadOrCreateNodeId(join(dir, 'data'));
  t.equal(replaced.created, true);
  t.not(replaced.nodeId, first.nodeId);
});
