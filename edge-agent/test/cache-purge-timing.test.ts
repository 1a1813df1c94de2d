// Purge cost on a cache of 100,000 objects. Prints the figures; asserts only
// correctness (timing thresholds do not belong in tests on a shared machine).
import t from 'tap';
import { CacheStore, type CachedObject } from '../src/cache/index.ts';

const keyOf = (i: number) => `ep\x1f\x1f\x1f/videos/show-${i % 100}/seg-${i}.ts`;

function object(store: CacheStore, i: number, extraTags: string[] = ['catalog']): CachedObject {
  const path = `/videos/show-${i % 100}/seg-${i}.ts`;
  const key = `ep\x1f\x1f\x1f${path}`;
  const g = store.currentGeneration;
  return {
    key, primaryKey: key, endpointId: 'ep', path, tags: [`show-${i % 100}`, ...extraTags], status: 200, headers: [['content-length', '1']], body: Buffer.from('x'), size: 1,
    requestTimeMs: 0, responseTimeMs: 0, correctedInitialAgeMs: 0, lifetimeMs: 1e9, mustRevalidate: false, noCache: false, staleWhileRevalidateMs: 0, staleIfErrorMs: 0,
    etag: undefined, lastModified: undefined, varyNames: null, varyValues: '', authorizationAllowed: false, generation: g, checkedGeneration: g, cacheRuleId: null,
    browserCacheControl: null, statusHeader: true, hitHeaders: null, hitHeadersAge: -1,
  };
}

/** Waits for the background lurker's sweeps to finish; the object count after them. */
async function lurked(store: CacheStore): Promise<number> {
  await store.settled();
  return store.objectCount;
}

t.test('purges on 100,000 objects', async (t) => {
  const store = new CacheStore({ memoryBytes: 1024 * 1024 * 1024 });
  const N = 100_000;
  for (let i = 0; i < N; i++) store.set(object(store, i));
  t.equal(store.objectCount, N);
  // Each figure: the median of several purges of the same kind (on different targets), with min and max.
  const time = (label: string, fn: (i: number) => unknown, runs = 5) => {
    const us: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      fn(i);
      us.push((performance.now() - t0) * 1000);
    }
    us.sort((a, b) => a - b);
    t.comment(`${label}: median ${us[us.length >> 1].toFixed(1)} µs (min ${us[0].toFixed(1)}, max ${us[us.length - 1].toFixed(1)}, ${runs} runs)`);
  };
  // Warm the code paths once (JIT), as a long-running agent would be.
  store.purgePath('ep', '/videos/show-1/seg-1.ts');
  store.purgeTag('ep', 'show-2');
  store.purgeWildcard('ep', '/videos/show-3/*');
  const base = await lurked(store);
  t.equal(base, N - 2001, 'warm-up purges applied (1 + 1,000 + 1,000)');
  time('path purge (1 object)', (i) => store.purgePath('ep', `/videos/show-7/seg-${7 + i * 100}.ts`));
  t.equal(store.get(keyOf(7)), undefined);
  time('tag purge (1,000 objects carry the tag)', (i) => store.purgeTag('ep', `show-${8 + i}`)); // show-8 … show-12
  t.equal(store.get(keyOf(8)), undefined, 'tag purge takes effect at once');
  t.equal(store.get(keyOf(112)), undefined);
  t.ok(store.get(keyOf(13)), 'objects without the tag kept');
  t.equal(await lurked(store), base - 5 - 5000, 'lurker freed the tagged objects');
  time('wildcard purge /videos/show-N/* (ban)', (i) => store.purgeWildcard('ep', `/videos/show-${20 + i}/*`));
  t.equal(store.get(keyOf(20)), undefined, 'wildcard takes effect at once');
  t.ok(store.get(keyOf(30)), 'others kept');
  t.equal(await lurked(store), base - 5 - 10_000, 'lurker reclaimed the banned objects');
  const left = store.objectCount;
  let reported = 0;
  time(`tag purge (all ${left.toLocaleString('en')} objects carry the tag)`, () => (reported = store.purgeTag('ep', 'catalog')));
  t.equal(reported, left, 'reports the objects it covers');
  t.equal(store.get(keyOf(11)), undefined);
  t.equal(store.get(keyOf(99_999)), undefined);
  t.equal(await lurked(store), 0, 'lurker freed every tagged object');
  for (let i = 0; i < 1000; i++) store.set(object(store, i));
  time('purge all (ban)', () => store.purgeAll('ep'));
  t.equal(store.get(keyOf(11)), undefined);
  t.equal(await lurked(store), 0, 'lurker emptied the endpoint');
});

t.test('tag purge semantics', async (t) => {
  const store = new CacheStore({ memoryBytes: 64 * 1024 * 1024 });
  for (let i = 0; i < 10; i++) store.set(object(store, i, ['news']));
  t.equal(store.purgeTag('ep', 'news'), 10);
  t.equal(store.purgeTag('other-endpoint', 'news'), 0, 'tags are per endpoint');
  for (let i = 0; i < 10; i++) t.equal(store.get(keyOf(i)), undefined, `object ${i} is a miss after its tag was purged`);
  // Stored after the purge with the same tag: served.
  store.set(object(store, 3, ['news']));
  t.ok(store.get(keyOf(3)), 'an object stored after the purge with that tag is served');
  await store.settled();
  t.ok(store.get(keyOf(3)), 'and the lurker leaves it alone');
  t.equal(store.objectCount, 1);
  // A fetch that began before the purge cannot store its object afterwards.
  const inFlight = object(store, 4, ['news']);
  store.purgeTag('ep', 'news');
  t.equal(store.set(inFlight), false, 'an object fetched before the purge is refused');
  t.equal(store.get(keyOf(4)), undefined);
  t.equal(store.get(keyOf(3)), undefined, 'the second purge covers the object stored in between');
  // Path purges stay exact and immediate.
  store.set(object(store, 5, []));
  store.set(object(store, 6, []));
  t.equal(store.purgePath('ep', '/videos/show-5/seg-5.ts'), 1);
  t.equal(store.get(keyOf(5)), undefined);
  t.ok(store.get(keyOf(6)));
});
