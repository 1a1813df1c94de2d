// One conformance suite for every ObjectStore (as undici runs one suite per
// cache store): each store's test file runs it with a factory of fresh stores.
import type { Test } from 'tap';
import { entryBytes, type ObjectStore } from './store.ts';

export type StoreFactory = (maxBytes: number) => Promise<ObjectStore>;

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
    tt.equal(await store.put('k', '{"status":200,"é":"ü"}', bytes), true);
    const got = store.get('k');
    tt.equal(got?.meta, '{"status":200,"é":"ü"}');
    tt.ok(got?.body.equals(bytes));
    tt.equal(store.count(), 1);
  });

  t.test('an empty body and a key longer than any engine key limit are stored', async (tt) => {
    const store = await fresh(tt);
    const long = `GET https://a.test/${'x'.repeat(5000)}`;
    tt.equal(await store.put(long, 'm', Buffer.alloc(0)), true);
    tt.equal(store.get(long)?.body.length, 0);
    tt.equal(store.get(long.slice(0, -1)), undefined, 'a prefix of the key is another key');
  });

  t.test('a put under a held key replaces it and counts its bytes once', async (tt) => {
    const store = await fresh(tt);
    await store.put('k', 'old', body(1000));
    await store.put('k', 'new', body(10, 1));
    tt.equal(store.get('k')?.meta, 'new');
    tt.equal(store.get('k')?.body.length, 10);
    tt.equal(store.count(), 1);
    tt.equal(store.bytes(), entryBytes('k', 'new', body(10)));
  });

  t.test('the byte count is the sum of what the entries cost', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'ma', body(100));
    await store.put('b', 'mbb', body(2000));
    tt.equal(store.bytes(), entryBytes('a', 'ma', body(100)) + entryBytes('b', 'mbb', body(2000)));
  });

  t.test('a delete removes the entry and gives its bytes back', async (tt) => {
    const store = await fresh(tt);
    await store.put('a', 'm', body(100));
    await store.put('b', 'm', body(100));
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
      await store.put(`k${i}`, 'm', body(1000 + (i % 7) * 300));
      tt.ok(store.bytes() <= store.maxBytes, `after put ${i}`) || tt.bailout?.();
    }
    tt.ok(store.count() > 10, 'and it still holds a working set');
    tt.ok(store.get('k199'), 'the newest entry is held');
  });

  t.test('the oldest entries are evicted first when none was read', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 10);
    for (let i = 0; i < 15; i++) await store.put(key(i), 'm', body(1000));
    for (let i = 0; i < 5; i++) tt.equal(store.get(key(i)), undefined, `k${i} evicted`);
    for (let i = 5; i < 15; i++) tt.ok(store.get(key(i)), `k${i} held`);
  });

  t.test('an old entry that is read survives a stream of new ones', async (tt) => {
    const size = entryBytes(key(0), 'm', body(1000));
    const store = await fresh(tt, size * 10);
    for (let i = 0; i < 10; i++) await store.put(key(i), 'm', body(1000));
    for (let i = 10; i < 40; i++) {
      tt.ok(store.get(key(0)), `k0 read before put ${i}`);
      await store.put(key(i), 'm', body(1000));
    }
    tt.ok(store.get(key(0)), 'the hot entry is still held');
    tt.equal(store.get(key(1)), undefined, 'a cold one of its age is not');
  });

  t.test('an entry larger than the whole bound is refused and drops what the key held', async (tt) => {
    const store = await fresh(tt, 10_000);
    await store.put('big', 'm', body(100));
    await store.put('other', 'm', body(100));
    tt.equal(await store.put('big', 'm', body(20_000)), false);
    tt.equal(store.get('big'), undefined);
    tt.ok(store.get('other'), 'other entries stay');
    tt.equal(store.bytes(), entryBytes('other', 'm', body(100)));
  });

  t.test('keys lists every held key', async (tt) => {
    const store = await fresh(tt);
    for (const k of ['a', 'b', 'c']) await store.put(k, 'm', body(10));
    await store.delete('b');
    tt.same([...store.keys()].sort(), ['a', 'c']);
  });

  t.test('clear empties the store and its byte count', async (tt) => {
    const store = await fresh(tt);
    for (const k of ['a', 'b', 'c']) await store.put(k, 'm', body(10));
    await store.clear();
    tt.equal(store.count(), 0);
    tt.equal(store.bytes(), 0);
    tt.equal(store.get('a'), undefined);
    tt.equal(await store.put('a', 'm', body(10)), true, 'and it stores again');
  });
}
