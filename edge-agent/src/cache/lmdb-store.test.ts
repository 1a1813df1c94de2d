// The node-wide tier (LMDB): the store conformance suite, then what only a
// shared, persistent store must do — keep its entries across a restart, be
// read and written by several processes at once within one size bound, and
// start empty (with one line) from a damaged or foreign file instead of
// crashing the agent.
import { execFile } from 'node:child_process';
import { mkdtempSync, openSync, rmSync, statSync, writeSync, closeSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { open } from 'lmdb';
import t from 'tap';
import { FORMAT, LmdbStore } from './lmdb-store.ts';
import { ix, storeConformance } from './store-conformance.ts';

const run = promisify(execFile);
const child = new URL('./lmdb-store.child.ts', import.meta.url).pathname;

function tempDir(tt: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'lmdb-store-'));
  tt.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('conformance', async (tt) => {
  storeConformance(tt, async (maxBytes) => LmdbStore.open({ dir: tempDir(tt), maxBytes }));
});

t.test('entries stored before a restart are read after it', async (tt) => {
  const dir = tempDir(tt);
  const first = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  await first.put('GET https://a.test/seg-1.ts', '{"status":200}', Buffer.alloc(4000, 3), ix(first));
  const bytes = first.bytes();
  await first.close();
  const second = await LmdbStore.openChecked({ dir, maxBytes: 1 << 20 });
  tt.teardown(() => second.close());
  tt.equal(second.get('GET https://a.test/seg-1.ts')?.meta, '{"status":200}');
  tt.equal(second.get('GET https://a.test/seg-1.ts')?.body.length, 4000);
  tt.equal(second.bytes(), bytes, 'with its byte count');
});

t.test('a store reopened with a smaller bound evicts down to it', async (tt) => {
  const dir = tempDir(tt);
  const first = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  for (let i = 0; i < 100; i++) await first.put(`k${i}`, 'm', Buffer.alloc(5000), ix(first));
  await first.close();
  const second = await LmdbStore.open({ dir, maxBytes: 100_000 });
  tt.teardown(() => second.close());
  tt.ok(second.bytes() <= 100_000);
  tt.ok(second.get('k99'), 'the newest stay');
  tt.equal(second.get('k0'), undefined, 'the oldest go');
});

t.test('a whole store passes the check and keeps its entries', async (tt) => {
  const dir = tempDir(tt);
  const first = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  for (let i = 0; i < 50; i++) await first.put(`k${i}`, `m${i}`, Buffer.alloc(100 * i), ix(first));
  tt.same(first.walk().problems, []);
  await first.close();
  const lines: string[] = [];
  const second = await LmdbStore.openChecked({ dir, maxBytes: 1 << 20 }, (l) => lines.push(l));
  tt.teardown(() => second.close());
  tt.same(lines, [], 'no line about the store');
  tt.equal(second.count(), 50);
});

for (const [name, damage] of [
  ['overwritten with garbage', (file: string) => {
    const fd = openSync(file, 'r+');
    const size = statSync(file).size;
    for (let at = 0; at < size; at += 4096) writeSync(fd, Buffer.alloc(512, 0xa5), 0, 512, at);
    closeSync(fd);
  }],
  ['truncated', (file: string) => truncateSync(file, 3000)],
] as const) {
  t.test(`a store file ${name} is removed and the node starts empty with one line`, async (tt) => {
    const dir = tempDir(tt);
    const first = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
    for (let i = 0; i < 40; i++) await first.put(`k${i}`, 'm', Buffer.alloc(8000, i), ix(first));
    await first.close();
    damage(join(dir, 'cache.mdb'));
    const lines: string[] = [];
    const store = await LmdbStore.openChecked({ dir, maxBytes: 1 << 20 }, (l) => lines.push(l));
    tt.teardown(() => store.close());
    tt.equal(lines.length, 1, 'one line');
    tt.match(lines[0], /node cache at .*cache\.mdb could not be read .*starting empty/);
    tt.equal(store.count(), 0);
    tt.equal(await store.put('k', 'm', Buffer.alloc(10), ix(store)), true, 'and it stores');
    tt.ok(store.get('k'));
  });
}

t.test('a store of another format is emptied at open', async (tt) => {
  const dir = tempDir(tt);
  const first = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  await first.put('k', 'm', Buffer.alloc(10), ix(first));
  await first.close();
  const raw = open({ path: join(dir, 'cache.mdb'), maxDbs: 4 });
  await raw.openDB('state', {}).put('format', FORMAT + 1);
  await raw.close();
  const store = await LmdbStore.openChecked({ dir, maxBytes: 1 << 20 });
  tt.teardown(() => store.close());
  tt.equal(store.count(), 0);
  tt.equal(store.bytes(), 0);
});

t.test('another process reads what this one stored, and this one what it stored', async (tt) => {
  const dir = tempDir(tt);
  const store = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  tt.teardown(() => store.close());
  await store.put('mine', 'from parent', Buffer.alloc(1234), ix(store));
  const { stdout } = await run(process.execPath, [child, dir, String(1 << 20), 'theirs', '3', 'mine']);
  tt.same(JSON.parse(stdout).probe, { meta: 'from parent', length: 1234 });
  tt.equal(store.get('theirs-2')?.meta, 'meta theirs 2');
  tt.equal(store.count(), 4);
});

t.test('two processes writing at once keep the store within its bound', async (tt) => {
  const dir = tempDir(tt);
  const maxBytes = 60_000;
  const store = await LmdbStore.open({ dir, maxBytes });
  tt.teardown(() => store.close());
  await Promise.all([
    run(process.execPath, [child, dir, String(maxBytes), 'a', '300']),
    run(process.execPath, [child, dir, String(maxBytes), 'b', '300']),
    (async () => { for (let i = 0; i < 300; i++) await store.put(`p-${i}`, 'm', Buffer.alloc(1500), ix(store)); })(),
  ]);
  tt.ok(store.bytes() <= maxBytes, `bytes ${store.bytes()} within ${maxBytes}`);
  tt.same(store.walk().problems, [], 'entries, order and count agree');
  tt.ok(store.count() > 10);
});

t.test('a purge in one process removes what another stored and refuses its fills begun before it', async (tt) => {
  const dir = tempDir(tt);
  const store = await LmdbStore.open({ dir, maxBytes: 1 << 20 });
  tt.teardown(() => store.close());
  const fill = ix(store, '/p');
  await run(process.execPath, [child, dir, String(1 << 20), 'theirs', '3']);
  tt.equal(store.count(), 3);
  tt.equal(await store.purge('ep', { kind: 'path', path: '/p' }), 3, 'the entries another process stored are found by path');
  tt.equal(await store.put('late', 'm', Buffer.alloc(10), fill), false, 'a fill begun before the purge is refused');
  const { stdout } = await run(process.execPath, [child, dir, String(1 << 20), 'after', '1', 'after-0']);
  tt.ok(JSON.parse(stdout).probe, 'a fill another process begins after it is stored');
  tt.same(store.walk().problems, []);
});
