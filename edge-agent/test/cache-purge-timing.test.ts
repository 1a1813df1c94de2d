// Purge cost on a cache of 100,000 objects. Prints the figures; asserts only
// correctness (timing thresholds do not belong in tests on a shared machine).
import t from 'tap';
import { CacheStore, type CachedObject } from '../src/proxy/cache-store.ts';

function object(store: CacheStore, i: number): CachedObject {
  const path = `/videos/show-${i % 100}/seg-${i}.ts`;
  const key = `ep\x1f\x1f\x1f${path}`;
  const g = store.currentGeneration;
  return {
    key, primaryKey: key, endpointId: 'ep', path, tags: [`show-${i % 100}`], status: 200, headers: [['content-length', '1']], body: Buffer.from('x'), size: 1,
    requestTimeMs: 0, responseTimeMs: 0, correctedInitialAgeMs: 0, lifetimeMs: 1e9, mustRevalidate: false, noCache: false, staleWhileRevalidateMs: 0, staleIfErrorMs: 0,
    etag: undefined, lastModified: undefined, varyNames: null, varyValues: '', authorizationAllowed: false, generation: g, checkedGeneration: g, cacheRuleId: null,
    browserCacheControl: null, statusHeader: true, hitHeaders: null, hitHeadersAge: -1,
  };
}

t.test('purges on 100,000 objects', async (t) => {
  const store = new CacheStore({ memoryBytes: 1024 * 1024 * 1024, diskBytes: 0, diskDir: null });
  const N = 100_000;
  for (let i = 0; i < N; i++) store.set(object(store, i));
  t.equal(store.objectCount, N);
  const time = (label: string, fn: () => void) => {
    const t0 = performance.now();
    fn();
    const ms = performance.now() - t0;
    t.comment(`${label}: ${(ms * 1000).toFixed(1)} µs`);
  };
  // Warm the code paths once (JIT), as a long-running agent would be.
  store.purgePath('ep', '/videos/show-1/seg-1.ts');
  store.purgeTag('ep', 'show-2');
  store.purgeWildcard('ep', '/videos/show-3/*');
  await new Promise((r) => setTimeout(r, 500));
  const base = store.objectCount;
  time('path purge (1 object)', () => store.purgePath('ep', '/videos/show-7/seg-7.ts'));
  t.equal(store.get('ep\x1f\x1f\x1f/videos/show-7/seg-7.ts'), undefined);
  time('tag purge (1,000 objects)', () => store.purgeTag('ep', 'show-8'));
  t.equal(store.get('ep\x1f\x1f\x1f/videos/show-8/seg-8.ts'), undefined);
  t.equal(store.objectCount, base - 1001);
  time('wildcard purge /videos/show-9/* (ban)', () => store.purgeWildcard('ep', '/videos/show-9/*'));
  t.equal(store.get('ep\x1f\x1f\x1f/videos/show-9/seg-9.ts'), undefined, 'wildcard takes effect at once');
  t.ok(store.get('ep\x1f\x1f\x1f/videos/show-10/seg-10.ts'), 'others kept');
  await new Promise((r) => setTimeout(r, 500));
  t.equal(store.objectCount, base - 2001, 'lurker reclaimed the banned objects');
  time('purge all (ban)', () => store.purgeAll('ep'));
  t.equal(store.get('ep\x1f\x1f\x1f/videos/show-11/seg-11.ts'), undefined);
  await new Promise((r) => setTimeout(r, 1000));
  t.equal(store.objectCount, 0, 'lurker emptied the endpoint');
});
