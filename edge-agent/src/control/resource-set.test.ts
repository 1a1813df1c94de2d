import t from 'tap';
import { configDigest, encodeResource, splitSnapshot } from '../../../shared/src/config/resources.ts';
import { BASE_MISMATCH, ConfigPushError, ResourceSet, type ConfigPush, type PushedResource } from './resource-set.ts';

const ep = (id: string, tag = 'a') => ({ id, hostname: `${id}.test`, default_origin_id: 'o', origins: [{ id: `o`, host: `${tag}.example` }] });
const policy = (id: string, name = 'p') => ({ id, name });

function resources(entries: { endpoints?: object[]; response_headers_policies?: object[] }, version: number): PushedResource[] {
  return splitSnapshot(entries as Parameters<typeof splitSnapshot>[0]).map((r) => ({ ...r, version }));
}

function full(version: number, entries: { endpoints?: object[]; response_headers_policies?: object[] }): ConfigPush {
  const rs = resources(entries, version);
  return { version, full: true, baseVersion: 0, resources: rs, removed: [], digest: configDigest(rs.map((r) => [r.key, r.sha256])), resourceCount: rs.length };
}

function delta(baseVersion: number, version: number, before: { endpoints?: object[]; response_headers_policies?: object[] }, after: { endpoints?: object[]; response_headers_policies?: object[] }): ConfigPush {
  const old = new Map(resources(before, baseVersion).map((r) => [r.key, r.sha256]));
  const next = resources(after, version);
  const keys = new Set(next.map((r) => r.key));
  return {
    version, full: false, baseVersion,
    resources: next.filter((r) => old.get(r.key) !== r.sha256),
    removed: [...old.keys()].filter((k) => !keys.has(k)),
    digest: configDigest(next.map((r) => [r.key, r.sha256])), resourceCount: next.length,
  };
}

const refused = (fn: () => unknown, pattern: RegExp) => {
  try {
    fn();
  } catch (err) {
    return err instanceof ConfigPushError && pattern.test(err.message) ? true : (err as Error).message;
  }
  return 'did not throw';
};

t.test('a full push parses every resource; a delta parses only what changed and keeps the other entries', async (t) => {
  const set = new ResourceSet();
  const v1 = { endpoints: [ep('e1'), ep('e2'), ep('e3')], response_headers_policies: [policy('p1')] };
  const s1 = set.stage(full(1, v1));
  t.equal(s1.snapshot.endpoints.length, 3);
  t.equal(s1.snapshot.endpoints[0].enabled, true, 'defaults filled by the schema');
  t.equal(s1.snapshot.response_headers_policies.length, 1);
  t.equal(s1.changed, 4);
  t.equal(set.version, 0, 'staging changes nothing');
  set.commit(s1);
  t.equal(set.controlVersion, 1);
  const e1 = s1.snapshot.endpoints[0];
  const e3 = s1.snapshot.endpoints[2];

  const v2 = { endpoints: [ep('e1'), ep('e2', 'b'), ep('e4')], response_headers_policies: [policy('p1')] };
  const push = delta(1, 2, v1, v2);
  t.same(push.resources.map((r) => r.key), ['endpoint/e2', 'endpoint/e4']);
  t.same(push.removed, ['endpoint/e3']);
  const s2 = set.stage(push);
  t.equal(s2.changed, 3);
  t.equal(s2.nonEndpointChanged, false);
  const byId = new Map(s2.snapshot.endpoints.map((e) => [e.id, e]));
  t.equal(byId.get('e1'), e1, 'unchanged endpoint: the same parsed object');
  t.equal(byId.get('e2')!.origins[0].host, 'b.example');
  t.notOk(byId.has('e3'));
  t.not(byId.get('e2'), e3);
  t.equal(s2.digest.hex(), push.digest);
  set.commit(s2);

  const s3 = set.stage(full(3, v2));
  t.equal(s3.changed, 0, 'a full push of the same resources changes nothing');
  t.equal(s3.snapshot.endpoints.find((e) => e.id === 'e1'), e1, 'and keeps every parsed entry');

  const v4 = { ...v2, response_headers_policies: [policy('p1', 'renamed')] };
  t.equal(set.stage(delta(2, 4, v2, v4)).nonEndpointChanged, true, 'a policy change is flagged (compiled endpoints may depend on it)');
});

t.test('refusals: base, digest, count, removed key, sha256, id, JSON, schema, duplicates; nothing changes', async (t) => {
  const set = new ResourceSet();
  const v1 = { endpoints: [ep('e1'), ep('e2')] };
  t.equal(refused(() => set.stage(delta(0, 1, {}, v1)), /^base_mismatch: /), true, 'a delta on a set that did not come from the control plane');
  set.commit(set.stage(full(1, v1)));
  const v2 = { endpoints: [ep('e1', 'z'), ep('e2')] };
  const good = delta(1, 2, v1, v2);
  t.equal(refused(() => set.stage({ ...good, baseVersion: 5 }), /^base_mismatch: delta on version 5, this agent holds 1$/), true);
  t.equal(refused(() => set.stage({ ...good, digest: 'ff'.repeat(32) }), /^base_mismatch: digest/), true);
  t.equal(refused(() => set.stage({ ...good, resourceCount: 3 }), /^base_mismatch: 2 resources/), true);
  t.equal(refused(() => set.stage({ ...good, removed: ['endpoint/e9'] }), /^base_mismatch: removes endpoint\/e9/), true);
  t.equal(refused(() => set.stage({ ...full(2, v2), digest: 'ff'.repeat(32) }), /^digest_mismatch: /), true, 'a full push has no base: another prefix');
  const r = good.resources[0];
  t.equal(refused(() => set.stage({ ...good, resources: [{ ...r, sha256: 'ab'.repeat(32) }] }), /body does not match its sha256/), true);
  const other = encodeResource('endpoint', ep('e3'));
  t.equal(refused(() => set.stage({ ...good, resources: [{ ...other, key: 'endpoint/e1', version: 2 }] }), /body id "e3" does not match its key/), true);
  const notJson = Buffer.from('{nope');
  const { sha256Hex } = await import('../../../shared/src/config/resources.ts');
  t.equal(refused(() => set.stage({ ...good, resources: [{ key: 'endpoint/e1', version: 2, body: notJson, sha256: sha256Hex(notJson) }] }), /endpoint\/e1: body is not JSON/), true);
  const bad = encodeResource('endpoint', { id: 'e1', hostname: 'h', default_origin_id: 'o', origins: [] } as never);
  t.equal(refused(() => set.stage({ ...good, resources: [{ ...bad, version: 2 }] }), /^configuration refused: endpoint\/e1: origins: /), true);
  t.equal(refused(() => set.stage({ ...good, resources: [{ ...r }, { ...r }] }), /appears twice/), true);
  t.equal(refused(() => set.stage({ ...good, resources: [{ ...r, key: 'nonsense' }] }), /is not a resource key/), true);
  t.equal(set.version, 1);
  t.equal(set.digest.hex(), full(1, v1).digest, 'the held set is untouched');
  t.equal(BASE_MISMATCH, 'base_mismatch:');
});

t.test('a resource of a type this agent does not know counts in the digest and is not served', async (t) => {
  const set = new ResourceSet();
  const rs = resources({ endpoints: [ep('e1')] }, 1);
  const body = Buffer.from('{"id":"x"}');
  const { sha256Hex } = await import('../../../shared/src/config/resources.ts');
  const future = { key: 'waf_rule/x', version: 1, body, sha256: sha256Hex(body) };
  const all = [...rs, future];
  const staged = set.stage({ version: 1, full: true, baseVersion: 0, resources: all, removed: [], digest: configDigest(all.map((r) => [r.key, r.sha256])), resourceCount: 2 });
  t.equal(staged.snapshot.endpoints.length, 1);
  t.equal(staged.resources.get('waf_rule/x')?.entry, null);
});

t.test('a snapshot from a file becomes a resource set the control plane cannot diff from', async (t) => {
  const set = new ResourceSet();
  const snapshot = { version: 9, generated_at: 'x', endpoints: [], response_headers_policies: [], log_drains: [] };
  set.commit(set.stageSnapshot(snapshot, 'file'));
  t.equal(set.version, 9);
  t.equal(set.controlVersion, 0);
});
