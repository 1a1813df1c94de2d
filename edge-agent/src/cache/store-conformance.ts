// One conformance suite for every ObjectStore (as undici runs one suite per
// cache store): each store's test file runs it with a factory of fresh stores.
import type { Test } from 'tap';
import type { EntryIndex } from './purge.ts';
import { entryBytes, type ObjectStore } from './store.ts';

export type StoreFactory = (maxBytes: number) => Promise<ObjectStore>;

/** The index of an entry of endpoint ep (or another) whose fill begins now. */
export const ix = (store: ObjectStore, path = '/p', tags: string[] = [], endpointId = 'ep'): EntryIndex => ({ endpointId, path, tags, generation: store.generation() });
const key = (i: number): string => `k${String(i).padStart(3, '0')}`;
const body = (n: number, fill = 7): Buffer => Buffer.alloc(n, fill);

export function storeConformance(t: Test, factory: StoreFactory): void {
  const fresh = async (tt: Test, maxBytes = 1 << 20): Promise<ObjectStore> => {
    const store = await factory(maxBytes);
    tt.teardown(() => store.close());
    return store;
  };

  t.test('a key never stored reads undefined', async (tt) => {
    const store = await fresh(tt);
    tt.equal(store.get('GET https://a.test/x'), undefined);
    tt.equal(store.count(), 0);
    tt.equal(store.bytes(), 0);
  });

  t.test('a stored entry reads back its metadata and every byte of its body', async (tt) => {
    const store = await fresh(tt);
    const bytes = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
    tt.equal(await store.put('k', '{"status":200,"é":"ü"}', bytes, ix(store)), true);
    const got = store.get('k');
    tt.equal(got?.meta, '{"status":200,"é":"ü"}');
    tt.ok(got?.body.equals(bytes));
    tt.equal(store.count(), 1);
  });

  t.test('an empty body and a key longer than any engine key limit are stored', async (tt) => {
    const store = await fresh(tt);
    const long = `GET https://a.test/${'x'.repeat(5000)}`;
    tt.equal(await store.put(long, 'm', Buffer.alloc(0), ix(store)), true);
    tt.equal(store.get(long)?.body.length, 0);
    tt.equal(store.get(long.slice(0, -1)), undefined, 'a prefix of the key is another key');
  });

  t.test('a put under a held key replaces it and counts its bytes once', async (tt) => {
    const store = await fresh(tt);
    await store.put('k', 'old', body(1000), ix(store));
    await store.put('k', 'new', body(10, 1), ix(store));
    tt.equal(store.get('k')?.meta, 'new');
    tt.equal(store.get('k')?.body.length, 10);
    tt.equal(store.count(), 1);
    tt.equal(store.bytes(), entryBytes('k', 'new', body(10)));
  });

  t.test('the byte count is the sum of what the entries cost', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'ma', body(100), ix(store));
    await store.put('b', 'mbb', body(2000), ix(store));
    tt.equal(store.bytes(), entryBytes('a', 'ma', body(100)) + entryBytes('b', 'mbb', body(2000)));
  });

  t.test('a delete removes the entry and gives its bytes back', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'm', body(100), ix(store));
    await store.put('b', 'm', body(100), ix(store));
    tt.equal(await store.delete('a'), true);
    tt.equal(await store.delete('a'), false, 'a second delete finds nothing');
    tt.equal(await store.delete('never'), false);
    tt.equal(store.get('a'), undefined);
    tt.ok(store.get('b'));
    tt.equal(store.bytes(), entryBytes('b', 'm', body(100)));
  });

  t.test('the size bound holds however much is stored', async (tt) => {
    const store = await fresh(tt, 64 * 1024);
    for (let i = 0; i < 200; i++) {
      await store.put(`k${i}`, 'm', body(1000 + (i % 7) * 300), ix(store));
      tt.ok(store.bytes() <= store.maxBytes, `after put ${i}`) || tt.bailout?.();
    }
    tt.ok(store.count() > 10, 'and it still holds a working set');
    tt.ok(store.get('k199'), 'the newest entry is held');
  });

  t.test('the oldest entries are evicted first when none was read', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 10);
    for (let i = 0; i < 15; i++) await store.put(key(i), 'm', body(1000), ix(store));
    for (let i = 0; i < 5; i++) tt.equal(store.get(key(i)), undefined, `k${i} evicted`);
    for (let i = 5; i < 15; i++) tt.ok(store.get(key(i)), `k${i} held`);
  });

  t.test('evictions counts the entries the bound removed, and nothing else', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 10);
    for (let i = 0; i < 10; i++) await store.put(key(i), 'm', body(1000), ix(store));
    await store.put(key(0), 'n', body(1000), ix(store)); // a replacement of the same size
    await store.delete(key(1));
    tt.equal(store.evictions(), 0, 'replacing and deleting evict nothing');
    for (let i = 10; i < 15; i++) await store.put(key(i), 'm', body(1000), ix(store));
    tt.equal(store.evictions(), 4, 'four entries made room for five (a delete had freed one slot)');
  });

  t.test('an old entry that is read survives a stream of new ones', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 10);
    for (let i = 0; i < 10; i++) await store.put(key(i), 'm', body(1000), ix(store));
    for (let i = 10; i < 40; i++) {
      tt.ok(store.get(key(0)), `k0 read before put ${i}`);
      await store.put(key(i), 'm', body(1000), ix(store));
    }
    tt.ok(store.get(key(0)), 'the hot entry is still held');
    tt.equal(store.get(key(1)), undefined, 'a cold one of its age is not');
  });

  t.test('an entry larger than the whole bound is refused and drops what the key held', async (tt) => {
    const store = await fresh(tt, 10_000);
    await store.put('big', 'm', body(100), ix(store));
    await store.put('other', 'm', body(100), ix(store));
    tt.equal(await store.put('big', 'm', body(20_000), ix(store)), false);
    tt.equal(store.get('big'), undefined);
    tt.ok(store.get('other'), 'other entries stay');
    tt.equal(store.bytes(), entryBytes('other', 'm', body(100)));
  });

  t.test('keys lists every held key', async (tt) => {
    const store = await fresh(tt);
    for (const k of ['a', 'b', 'c']) await store.put(k, 'm', body(10), ix(store));
    await store.delete('b');
    tt.same([...store.keys()].sort(), ['a', 'c']);
  });

  t.test('clear empties the store and its byte count', async (tt) => {
    const store = await fresh(tt);
    for (const k of ['a', 'b', 'c']) await store.put(k, 'm', body(10), ix(store));
    await store.clear();
    tt.equal(store.count(), 0);
    tt.equal(store.bytes(), 0);
    tt.equal(store.get('a'), undefined);
    tt.equal(await store.put('a', 'm', body(10), ix(store)), true, 'and it stores again');
  });

  t.test('a path purge removes every entry of the path, whatever its query, and only those', async (tt) => {
    const store = await fresh(tt);
    await store.put('/v/a.m3u8?x=1', 'm', body(10), ix(store, '/v/a.m3u8'));
    await store.put('/v/a.m3u8?x=2', 'm', body(10), ix(store, '/v/a.m3u8'));
    await store.put('/v/b.m3u8', 'm', body(10), ix(store, '/v/b.m3u8'));
    await store.put('other /v/a.m3u8', 'm', body(10), ix(store, '/v/a.m3u8', [], 'ep2'));
    tt.equal(await store.purge('ep', { kind: 'path', path: '/v/a.m3u8' }), 2);
    tt.equal(store.get('/v/a.m3u8?x=1'), undefined);
    tt.equal(store.get('/v/a.m3u8?x=2'), undefined);
    tt.ok(store.get('/v/b.m3u8'), 'another path stays');
    tt.ok(store.get('other /v/a.m3u8'), 'the same path of another endpoint stays');
    tt.equal(store.bytes(), entryBytes('/v/b.m3u8', 'm', body(10)) + entryBytes('other /v/a.m3u8', 'm', body(10)));
  });

  t.test('a tag purge removes the entries carrying the tag', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'm', body(10), ix(store, '/a', ['show-1', 'season-2']));
    await store.put('b', 'm', body(10), ix(store, '/b', ['show-1']));
    await store.put('c', 'm', body(10), ix(store, '/c', ['show-2']));
    tt.equal(await store.purge('ep', { kind: 'tag', tag: 'show-1' }), 2);
    tt.same([...store.keys()], ['c']);
    tt.equal(await store.purge('ep', { kind: 'tag', tag: 'season-2' }), 0, 'an entry purged by one tag is gone for its others');
  });

  t.test('a wildcard purge removes the paths it matches, an all purge the whole endpoint', async (tt) => {
    const store = await fresh(tt);
    await store.put('1', 'm', body(10), ix(store, '/videos/1/seg.ts'));
    await store.put('2', 'm', body(10), ix(store, '/videos/2/seg.ts'));
    await store.put('3', 'm', body(10), ix(store, '/images/3.jpg'));
    await store.put('4', 'm', body(10), ix(store, '/videos/4.ts', [], 'ep2'));
    tt.equal(await store.purge('ep', { kind: 'glob', pattern: '/videos/*' }), 2);
    tt.same([...store.keys()].sort(), ['3', '4']);
    tt.equal(await store.purge('ep', { kind: 'all' }), 1);
    tt.same([...store.keys()], ['4'], 'another endpoint keeps its entries');
  });

  t.test('a fill that began before a purge naming it is not stored; one that began after is', async (tt) => {
    const store = await fresh(tt);
    const before = ix(store, '/live/index.m3u8', ['live']);
    const beforeOther = ix(store, '/live/other.m3u8');
    await store.purge('ep', { kind: 'tag', tag: 'live' });
    tt.equal(await store.put('old', 'm', body(10), before), false, 'the purged object is not stored after the purge');
    tt.equal(store.get('old'), undefined);
    tt.equal(await store.put('other', 'm', body(10), beforeOther), true, 'a fill the purge does not name is stored');
    tt.equal(await store.put('new', 'm', body(10), ix(store, '/live/index.m3u8', ['live'])), true, 'a fill begun after it is stored');
    const wild = ix(store, '/x/y');
    await store.purge('ep', { kind: 'glob', pattern: '/x/*' });
    tt.equal(await store.put('xy', 'm', body(10), wild), false);
    const any = ix(store, '/z', [], 'ep');
    const otherEndpoint = ix(store, '/z', [], 'ep2');
    await store.purge('ep', { kind: 'all' });
    tt.equal(await store.put('z', 'm', body(10), any), false);
    tt.equal(await store.put('z2', 'm', body(10), otherEndpoint), true, 'an all purge names one endpoint');
  });

  t.test('a soft purge marks what it names stale, keeps it, and marks fills begun before it too', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'm', body(10), ix(store, '/v/a.ts', ['show']));
    await store.put('b', 'm', body(10), ix(store, '/v/b.ts'));
    const inFlight = ix(store, '/v/c.ts', ['show']);
    const before = Date.now();
    tt.equal(await store.purge('ep', { kind: 'tag', tag: 'show' }, true), 1, 'one held entry named');
    const a = store.get('a');
    tt.ok(a !== undefined && a.body.length === 10, 'the entry stays, body and all');
    tt.ok(a!.staleSince! >= before && a!.staleSince! <= Date.now(), 'stale since the purge');
    tt.equal(store.get('b')!.staleSince, undefined, 'an entry it does not name is not marked');
    tt.equal(await store.put('c', 'm', body(10), inFlight), true, 'a fill begun before it is stored');
    tt.ok(store.get('c')!.staleSince! >= before, 'and marked stale from the purge');
    await store.put('d', 'm', body(10), ix(store, '/v/d.ts', ['show']));
    tt.equal(store.get('d')!.staleSince, undefined, 'a fill begun after it is fresh');
    await store.put('a', 'm', body(10), ix(store, '/v/a.ts', ['show']));
    tt.equal(store.get('a')!.staleSince, undefined, 'a replacement fetched after it is fresh');
    tt.equal(await store.purge('ep', { kind: 'all' }, true), 4, 'a soft purge of all names every entry');
    tt.equal(store.count(), 4, 'and removes none');
    tt.ok(store.get('b')!.staleSince !== undefined);
    await store.purge('ep', { kind: 'path', path: '/v/b.ts' });
    tt.equal(store.get('b'), undefined, 'a later hard purge removes it');
  });

  t.test('evicted and replaced entries leave no index behind', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 5);
    for (let i = 0; i < 20; i++) await store.put(key(i), 'm', body(1000), ix(store, `/p${i % 3}`, ['t']));
    await store.put(key(19), 'm', body(1000), ix(store, '/moved', ['u']));
    const held = store.count();
    tt.equal(await store.purge('ep', { kind: 'tag', tag: 't' }), held - 1, 'the tag purge finds exactly the held entries that carry it');
    tt.equal(await store.purge('ep', { kind: 'path', path: '/moved' }), 1);
    tt.equal(store.count(), 0);
    tt.equal(store.bytes(), 0);
  });
}
