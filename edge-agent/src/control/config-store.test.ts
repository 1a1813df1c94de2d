import t, { type Test } from 'tap';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configDigest, encodeResource } from '../../../shared/src/config/resources.ts';
import { ConfigStore, type ConfigState } from './config-store.ts';
import type { HeldResource } from './resource-set.ts';
import { SealError, StateKey } from './sealing.ts';

function held(id: string, tag: string, version = 1): HeldResource {
  const r = encodeResource('endpoint', { id, tag } as never);
  return { key: r.key, type: 'endpoint', version, sha256: r.sha256, entry: null, body: r.body };
}

function state(version: number, resources: HeldResource[]): ConfigState {
  return { version, source: 'control-plane', digest: configDigest(resources.map((r) => [r.key, r.sha256])), resources };
}

function tmp(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'edge-config-store-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const bodies = (dir: string) => readdirSync(join(dir, 'config', 'resources')).sort();

t.test('a configuration round-trips; a delta writes only its new bodies and drops the ones no longer named', async (t) => {
  const dir = tmp(t);
  const store = new ConfigStore(dir);
  const a = held('a', '1');
  const b = held('b', '1');
  await store.saveConfig(() => state(1, [a, b]));
  t.equal(a.body, null, 'written bodies are dropped from memory');
  t.same(bodies(dir), [`${a.sha256}.json`, `${b.sha256}.json`].sort());
  const b2 = held('b', '2', 2);
  await store.saveConfig(() => state(2, [a, b2]));
  t.same(bodies(dir), [`${a.sha256}.json`, `${b2.sha256}.json`].sort(), 'one new body written, the old one deleted');

  const loaded = new ConfigStore(dir).load();
  t.equal(loaded?.config?.version, 2);
  t.equal(loaded?.config?.source, 'control-plane');
  t.same(loaded?.config?.resources.map((r) => [r.key, r.version, r.body.toString()]), [['endpoint/a', 1, '{"id":"a","tag":"1"}'], ['endpoint/b', 2, '{"id":"b","tag":"2"}']]);
  t.equal(loaded?.purgeSequence, 0);
});

t.test('writes coalesce: while one runs, only the newest state is written next', async (t) => {
  const dir = tmp(t);
  const store = new ConfigStore(dir);
  let current = state(1, [held('a', '1')]);
  const written: number[] = [];
  const provider = () => {
    written.push(current.version);
    return current;
  };
  const first = store.saveConfig(provider);
  for (let v = 2; v <= 5; v++) {
    current = state(v, [held('a', String(v), v)]);
    void store.saveConfig(provider);
  }
  await first;
  await store.flush();
  t.same(written, [1, 5], 'versions 2..4 were never written');
  t.equal(new ConfigStore(dir).load()?.config?.version, 5);
  t.equal(bodies(dir).length, 1);
});

t.test('damage is detected whole: a body that does not match, a missing body; strays from a crashed write are removed', async (t) => {
  const dir = tmp(t);
  const store = new ConfigStore(dir);
  const a = held('a', '1');
  const b = held('b', '1');
  await store.saveConfig(() => state(1, [a, b]));
  // A crash after writing a new body but before its manifest: the previous manifest stands, the stray goes.
  const stray = held('c', '1');
  writeFileSync(join(dir, 'config', 'resources', `${stray.sha256}.json`), stray.body!);
  writeFileSync(join(dir, 'config', 'resources', `${stray.sha256}.json.123.tmp`), 'half');
  const loaded = new ConfigStore(dir).load();
  t.equal(loaded?.config?.resources.length, 2);
  t.notOk(existsSync(join(dir, 'config', 'resources', `${stray.sha256}.json`)), 'stray removed');
  t.equal(bodies(dir).length, 2);

  writeFileSync(join(dir, 'config', 'resources', `${a.sha256}.json`), '{"id":"a","tag":"X"}');
  t.throws(() => new ConfigStore(dir).load(), /does not match its sha256/);
  rmSync(join(dir, 'config', 'resources', `${a.sha256}.json`));
  t.throws(() => new ConfigStore(dir).load(), /ENOENT/);
});

t.test('purge sequence alone, and the single-file snapshot of earlier agents', async (t) => {
  const dir = tmp(t);
  const store = new ConfigStore(dir);
  t.equal(store.load(), null, 'nothing persisted');
  store.savePurgeSequence(42);
  t.same(store.load(), { config: null, legacy: null, purgeSequence: 42 });
  writeFileSync(join(dir, 'config-snapshot.json'), JSON.stringify({ version: 3, snapshot: { version: 3, endpoints: [] } }));
  t.same(new ConfigStore(dir).load()?.legacy, { version: 3, snapshot: { version: 3, endpoints: [] } });
  t.match(readFileSync(join(dir, 'purge-sequence.json'), 'utf8'), '"sequence":42');
});

t.test('sealed: no body or manifest in clear, names are not the bodies\' digests, another key cannot open them', async (t) => {
  const dir = tmp(t);
  const key = StateKey.fromAgentToken('agt_config_store_test_token_0123');
  const store = new ConfigStore(dir, () => {}, key);
  const a = held('a', 'secret-value-a');
  await store.saveConfig(() => state(3, [a]));
  const files = bodies(dir);
  t.same(files, [`${key.name(a.sha256)}.json`], 'named by an HMAC of the digest');
  for (const f of [join(dir, 'config', 'manifest.json'), join(dir, 'config', 'resources', files[0]!)]) {
    const text = readFileSync(f).toString('latin1');
    t.notMatch(text, 'secret-value-a');
    t.notMatch(text, a.sha256);
  }
  const loaded = new ConfigStore(dir, () => {}, key).load();
  t.equal(loaded?.config?.version, 3);
  t.equal(loaded?.config?.needsReseal, false);
  t.same(loaded?.config?.resources.map((r) => r.body.toString()), ['{"id":"a","tag":"secret-value-a"}']);
  t.throws(() => new ConfigStore(dir, () => {}, StateKey.fromAgentToken('agt_another_token_abcdefghijklm')).load(), SealError, 'another token\'s key');
  t.throws(() => new ConfigStore(dir).load(), /sealed and this agent has no key/);
});

t.test('a configuration stored in clear is read once and said to need sealing; written again, the clear files are gone', async (t) => {
  const dir = tmp(t);
  const a = held('a', 'clear');
  await new ConfigStore(dir).saveConfig(() => state(1, [a]));
  writeFileSync(join(dir, 'config-snapshot.json'), '{"version":1,"snapshot":{}}');
  const key = StateKey.fromAgentToken('agt_config_store_test_token_0123');
  const store = new ConfigStore(dir, () => {}, key);
  const loaded = store.load();
  t.equal(loaded?.config?.needsReseal, true);
  const again = held('a', 'clear');
  await store.saveConfig(() => state(1, [again]));
  t.same(bodies(dir), [`${key.name(a.sha256)}.json`], 'only the sealed body is left');
  t.notOk(existsSync(join(dir, 'config-snapshot.json')), 'the legacy single-file snapshot is gone too');
  t.equal(new ConfigStore(dir, () => {}, key).load()?.config?.needsReseal, false);
});
