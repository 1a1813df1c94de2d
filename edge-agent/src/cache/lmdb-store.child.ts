// Test helper (lmdb-store.test.ts): another process of the node. Opens the
// store in argv[2] with bound argv[3], stores argv[5] entries named argv[4]-N,
// reports what it reads of the key argv[6] if given, and exits.
import { LmdbStore } from './lmdb-store.ts';
import { ix } from './store-conformance.ts';

const [dir, maxBytes, prefix, n, probe] = process.argv.slice(2);
const store = await LmdbStore.open({ dir: dir!, maxBytes: Number(maxBytes) });
for (let i = 0; i < Number(n); i++) await store.put(`${prefix}-${i}`, `meta ${prefix} ${i}`, Buffer.alloc(1500, i % 256), ix(store));
const seen = probe ? store.get(probe) : undefined;
process.stdout.write(JSON.stringify({ probe: seen ? { meta: seen.meta, length: seen.body.length } : null, bytes: store.bytes() }));
await store.close();
