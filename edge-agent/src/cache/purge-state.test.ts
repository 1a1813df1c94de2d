// The purge sequence and what it does to the cache, on a real CacheStore (and
// a real node tier where the test says so): purges apply once and in order, a
// held or lagging agent answers nothing from the cache until it has caught up,
// and being cut off from the control plane switches revalidation as configured.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import t from 'tap';
import { CacheStore, type CachedObject } from './cache-store.ts';
import { LmdbStore } from './lmdb-store.ts';
import { pathOf, PurgeState, type CacheGate, type PurgeCommand, type PurgeStateOptions } from './purge-state.ts';

function object(store: CacheStore, endpointId: string, path: string, tags: string[] = []): CachedObject {
  const key = `${endpointId}\x1f\x1f\x1f${path}`;
  const g = store.currentGeneration;
  return {
    key, primaryKey: key, endpointId, path, tags, status: 200, headers: [['content-length', '1']], body: Buffer.from('x'), size: 1,
    requestTimeMs: Date.now(), responseTimeMs: Date.now(), correctedInitialAgeMs: 0, lifetimeMs: 1e9, mustRevalidate: false, noCache: false,
    staleWhileRevalidateMs: 0, staleIfErrorMs: 0, etag: '"v1"', lastModified: undefined, varyNames: null, varyValues: '', authorizationAllowed: false,
    generation: g, checkedGeneration: g, cacheRuleId: null, browserCacheControl: null, statusHeader: true, hitHeaders: null, hitHeadersAge: -1,
  };
}

const keyOf = (endpointId: string, path: string) => `${endpointId}\x1f\x1f\x1f${path}`;

function setup(overrides: Partial<PurgeStateOptions> = {}) {
  const store = overrides.store ?? new CacheStore({ memoryBytes: 1024 * 1024 });
  const gate: CacheGate = { cacheReadsSuspended: false, revalidateAll: false };
  const persisted: number[] = [];
  const state = new PurgeState({
    store, gate, logger: pino({ level: 'silent' }), endpoints: () => ['ep-1'], persist: (s) => persisted.push(s), ...overrides,
  });
  return { store, gate, persisted, state };
}

const purge = (sequence: number, fields: Partial<PurgeCommand> = {}): PurgeCommand =>
  ({ sequence, purge_id: `p-${sequence}`, endpoint_id: 'ep-1', type: 'path', paths: ['/a.mp4'], ...fields });

t.test('a purge applies once, in order; replays at or below the applied sequence change nothing', async (t) => {
  const { store, state, persisted } = setup();
  store.set(object(store, 'ep-1', '/a.mp4'));
  t.same(await state.apply(purge(1)), { applied: true, purged: 1 });
  t.equal(store.get(keyOf('ep-1', '/a.mp4')), undefined, 'the object is gone');
  store.set(object(store, 'ep-1', '/a.mp4'));
  t.same(await state.apply(purge(1)), { applied: false, purged: 0 }, 'a replay is acknowledged without effect');
  t.ok(store.get(keyOf('ep-1', '/a.mp4')), 'the object fetched after the purge stays');
  t.equal(state.sequence, 1);
  t.same(persisted, [1], 'each newly applied sequence is persisted once');
});

t.test('a purge of every endpoint covers the configuration\'s endpoints and those the cache holds', async (t) => {
  const { store, state } = setup();
  store.set(object(store, 'ep-1', '/a.mp4'));
  store.set(object(store, 'ep-gone', '/a.mp4'));
  t.same(await state.apply(purge(1, { endpoint_id: '' })), { applied: true, purged: 2 });
  t.equal(store.objectCount, 0);
});

t.test('purge paths are named as request paths are: full URLs, query strings and encodings', async (t) => {
  t.equal(pathOf('https://cdn.example/v/a.mp4?x=1'), '/v/a.mp4');
  t.equal(pathOf('/v/a.mp4?x=1'), '/v/a.mp4');
  t.equal(pathOf('/%7Euser/a'), '/~user/a');
  t.equal(pathOf('/v/./b/../a.mp4'), '/v/a.mp4');
  const { store, state } = setup();
  store.set(object(store, 'ep-1', '/~user/a'));
  t.same(await state.apply(purge(1, { paths: ['http://any.host/%7Euser/a'] })), { applied: true, purged: 1 });
});

t.test('a tag purge, a wildcard purge and a purge of everything', async (t) => {
  const { store, state } = setup();
  store.set(object(store, 'ep-1', '/show/1.ts', ['show']));
  store.set(object(store, 'ep-1', '/show/2.ts'));
  store.set(object(store, 'ep-1', '/other.ts'));
  t.same(await state.apply(purge(1, { type: 'tag', paths: undefined, tags: ['show'] })), { applied: true, purged: 1 });
  t.equal(store.get(keyOf('ep-1', '/show/1.ts')), undefined);
  await state.apply(purge(2, { type: 'wildcard', paths: ['/show/*'] }));
  t.equal(store.get(keyOf('ep-1', '/show/2.ts')), undefined);
  t.ok(store.get(keyOf('ep-1', '/other.ts')));
  await state.apply(purge(3, { type: 'all', paths: undefined }));
  t.equal(store.get(keyOf('ep-1', '/other.ts')), undefined);
  t.equal(state.sequence, 3);
});

t.test('a soft purge marks the object stale and keeps it', async (t) => {
  const { store, state } = setup();
  store.set(object(store, 'ep-1', '/a.mp4'));
  t.same(await state.apply(purge(1, { soft: true })), { applied: true, purged: 1 });
  const o = store.get(keyOf('ep-1', '/a.mp4'));
  t.ok(o, 'still stored');
  t.ok(o !== undefined && o.lifetimeMs < 1e9, 'no longer fresh: its next use revalidates');
});

t.test('an unknown purge type throws and leaves the sequence; skip records it as seen', async (t) => {
  const { state } = setup();
  t.throws(() => state.apply(purge(1, { type: 'everything' as PurgeCommand['type'] })), /unknown purge type everything/);
  t.equal(state.sequence, 0);
  state.skip(1, 'unknown type');
  t.equal(state.sequence, 1);
});

t.test('held at start: nothing is served from the cache until the Welcome, then until the missed purges are applied', async (t) => {
  const { store, gate, state } = setup();
  state.restore(4);
  store.set(object(store, 'ep-1', '/a.mp4'));
  state.holdUntilWelcome(0);
  t.equal(gate.cacheReadsSuspended, false, 'an empty node tier holds nothing back');
  state.holdUntilWelcome(1);
  t.equal(gate.cacheReadsSuspended, true);
  t.equal(state.cacheEmpty, false, 'the Hello does not say the cache is empty');
  t.equal(state.beginCatchUp(6), true, 'the Welcome says two purges were missed');
  t.equal(state.catchingUp, true);
  await state.apply(purge(5, { paths: ['/b.mp4'] }));
  t.equal(gate.cacheReadsSuspended, true, 'one of two applied: still held');
  await state.apply(purge(6));
  t.equal(gate.cacheReadsSuspended, false, 'both applied: the cache serves again');
  t.equal(store.get(keyOf('ep-1', '/a.mp4')), undefined, 'the missed purge took the object');
  t.equal(state.beginCatchUp(6), false, 'not behind');
});

t.test('held at start and cut off before any Welcome: CACHE_WHEN_DISCONNECTED decides', async (t) => {
  for (const [mode, revalidate] of [['revalidate', true], ['serve', false]] as const) {
    const { store, gate, state } = setup({ cacheWhenDisconnected: mode });
    store.set(object(store, 'ep-1', '/a.mp4'));
    state.holdUntilWelcome(1);
    state.controlPlaneLost(true);
    t.equal(gate.cacheReadsSuspended, false, `${mode}: no longer held for a Welcome that does not come`);
    t.equal(gate.revalidateAll, revalidate, `${mode}: every object revalidated: ${revalidate}`);
    t.equal(state.cutOff, true);
    state.controlPlaneLost(false);
    t.equal(gate.revalidateAll, false, `${mode}: back: served as fresh as it is`);
  }
});

t.test('startFrom drops the cache and takes the sequence; an older one is ignored', async (t) => {
  const { store, state, persisted } = setup();
  store.set(object(store, 'ep-1', '/a.mp4'));
  state.startFrom(10);
  t.equal(store.get(keyOf('ep-1', '/a.mp4')), undefined, 'dropped (a ban: the lurker frees it later)');
  t.equal(state.sequence, 10);
  store.set(object(store, 'ep-1', '/a.mp4'));
  state.startFrom(9, true);
  t.ok(store.get(keyOf('ep-1', '/a.mp4')), 'nothing dropped for an older sequence');
  t.same(persisted, [10]);
});

t.test('a worker adopts its primary\'s state: sequence, catch-up and cut-off', async (t) => {
  const primary = setup();
  primary.state.restore(3);
  primary.state.beginCatchUp(5);
  primary.state.controlPlaneLost(true);
  t.same(primary.state.snapshot, { purgeSequence: 3, catchUpTarget: 5, cutOff: true });
  const worker = setup();
  worker.state.adopt(primary.state.snapshot);
  t.equal(worker.state.sequence, 3);
  t.equal(worker.gate.cacheReadsSuspended, true);
  t.equal(worker.gate.revalidateAll, true);
  t.same(worker.state.snapshot, primary.state.snapshot);
  primary.state.beginCatchUp(3);
  t.same(primary.state.snapshot, { purgeSequence: 3, catchUpTarget: 0, cutOff: true }, 'caught up: no target to adopt');
});

t.test('with a node tier the purge is applied there before it resolves', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'purge-state-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const node = await LmdbStore.open({ dir, maxBytes: 64 * 1024 * 1024 });
  const store = new CacheStore({ memoryBytes: 1024 * 1024, node });
  t.teardown(() => store.close());
  const { state } = setup({ store });
  store.set(object(store, 'ep-1', '/a.mp4'));
  await store.written(keyOf('ep-1', '/a.mp4'));
  t.equal(node.count(), 1);
  const result = state.apply(purge(1));
  t.ok(result instanceof Promise, 'a promise: the ack waits for the node tier');
  t.same(await result, { applied: true, purged: 1 });
  t.equal(node.count(), 0, 'gone from the node tier too');
});
