// Run by LmdbStore.openChecked in a child process: opens the store in argv[2]
// and reads all of it. Exit 0: readable and consistent; 2: inconsistent (the
// reason on stderr); a crash (LMDB faults on some damaged files) is the parent's
// sign too.
import { FORMAT, LmdbStore } from './lmdb-store.ts';

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: lmdb-store-check.ts DIR\n');
  process.exit(64);
}
try {
  const store = await LmdbStore.openForCheck(dir);
  if (store === null) process.exit(0); // of another format: emptied at open, nothing to read
  const walk = store.walk();
  await store.close();
  if (walk.problems.length > 0) {
    process.stderr.write(`${walk.problems.slice(0, 3).join('; ')}\n`);
    process.exit(2);
  }
  process.exit(0);
} catch (e) {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)} (format ${FORMAT})\n`);
  process.exit(2);
}
