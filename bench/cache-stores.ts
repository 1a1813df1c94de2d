// Candidate engines for the node-wide cache tier (issue 33), one process, same
// run: what a hit (a synchronous read of one object) and a fill (a store) cost
// in CPU on each, for a 1 KiB and a 100 KiB object among --objects objects.
//   memory  the worker's hot tier (lru-cache), the floor
//   lmdb    LmdbStore (edge-agent/src/cache/lmdb-store.ts): memory-mapped, multi-process
//   lmdb-fast  the same file read with getBinaryFast (lmdb-js's reused buffer), no copy
//   sqlite  node:sqlite, WAL, one table (key, meta, body)
//   files   one file per object in a directory, read with readFileSync
// CPU per operation is process.cpuUsage over --ops operations, median of --rounds.
// Results are printed and added to bench/results/cache-stores.md (newest first).
// Run: node bench/cache-stores.ts [--objects 2000] [--ops 20000] [--rounds 5]
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { fileURLToPath } from 'node:url';
import { open } from 'lmdb';
import { LmdbStore, MemoryStore, type ObjectStore } from '../edge-agent/src/cache/index.ts';
import { numberFlag } from './lib/cli.ts';

const here = dirname(fileURLToPath(import.meta.url));
const OBJECTS = numberFlag('objects', 2000);
const OPS = numberFlag('ops', 20_000);
const ROUNDS = numberFlag('rounds', 5);
const META = JSON.stringify({ status: 200, headers: [['content-type', 'video/mp2t'], ['etag', '"abc"']], lifetimeMs: 60_000 });
const dir = mkdtempSync(join(tmpdir(), 'cache-stores-'));

interface Candidate {
  name: string;
  get(key: string): Buffer | undefined;
  put(key: string, body: Buffer): Promise<void>;
}

function fromStore(name: string, store: ObjectStore): Candidate {
  return { name, get: (k) => store.get(k)?.body, put: async (k, b) => { await store.put(k, META, b, { endpointId: 'bench', path: k, tags: [], generation: store.generation() }); } };
}

function sqliteCandidate(): Candidate {
  const db = new DatabaseSync(join(dir, 'sqlite.db'));
  db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE o (k TEXT PRIMARY KEY, meta TEXT, body BLOB)');
  const get = db.prepare('SELECT meta, body FROM o WHERE k = ?');
  const put = db.prepare('INSERT OR REPLACE INTO o (k, meta, body) VALUES (?, ?, ?)');
  return {
    name: 'sqlite',
    get: (k) => { const row = get.get(k) as { body: Uint8Array } | undefined; return row ? Buffer.from(row.body.buffer, row.body.byteOffset, row.body.length) : undefined; },
    put: async (k, b) => { put.run(k, META, b); },
  };
}

function filesCandidate(): Candidate {
  const root = join(dir, 'files');
  mkdirSync(root);
  const path = (k: string) => join(root, createHash('sha256').update(k).digest('hex'));
  return {
    name: 'files',
    get: (k) => { try { return readFileSync(path(k)); } catch { return undefined; } },
    put: async (k, b) => { writeFileSync(path(k), b); },
  };
}

async function lmdbFastCandidate(): Promise<Candidate> {
  const env = open({ path: join(dir, 'fast.mdb'), maxDbs: 1, compression: false });
  const db = env.openDB<Buffer, string>('data', { encoding: 'binary' });
  return { name: 'lmdb-fast', get: (k) => db.getBinaryFast(k), put: async (k, b) => { await db.put(k, b); } };
}

function cpuUsPer(ops: number, fn: (i: number) => void): number {
  const start = process.cpuUsage();
  for (let i = 0; i < ops; i++) fn(i);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / ops;
}

async function cpuUsPerAsync(ops: number, fn: (i: number) => Promise<void>): Promise<number> {
  const start = process.cpuUsage();
  for (let i = 0; i < ops; i++) await fn(i);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / ops;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const candidates: Candidate[] = [
  fromStore('memory', new MemoryStore(4 * 2 ** 30)),
  fromStore('lmdb', await LmdbStore.open({ dir: join(dir, 'lmdb'), maxBytes: 4 * 2 ** 30 })),
  await lmdbFastCandidate(),
  sqliteCandidate(),
  filesCandidate(),
];
const results: Record<string, Record<string, number>> = Object.fromEntries(candidates.map((c) => [c.name, {}]));
const hits: Record<string, number[]> = {};
try {
  for (const size of [1024, 100 * 1024]) {
    const body = Buffer.alloc(size, 7);
    const keys = Array.from({ length: OBJECTS }, (_, i) => `GET https://bench.test/${size}/${i}.ts`);
    for (const c of candidates) for (const k of keys) await c.put(k, body);
    for (let round = 0; round < ROUNDS; round++) {
      for (const c of candidates) {
        let checksum = 0;
        const us = cpuUsPer(OPS, (i) => { checksum += c.get(keys[(i * 7919) % OBJECTS]!)!.length; });
        if (checksum !== OPS * size) throw new Error(`${c.name} read wrong bytes`);
        (hits[`${c.name} ${size}`] ??= []).push(us);
      }
    }
    const putOps = Math.min(OPS, 2000);
    for (const c of candidates) {
      results[c.name]![`put ${size}`] = await cpuUsPerAsync(putOps, (i) => c.put(`fill ${size} ${i}`, body));
    }
  }
  for (const c of candidates) {
    for (const size of [1024, 100 * 1024]) {
      results[c.name]![`get ${size}`] = median(hits[`${c.name} ${size}`]!);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const f = (us: number) => (us < 10 ? us.toFixed(2) : us.toFixed(1));
const rows = candidates.map((c) => {
  const r = results[c.name]!;
  return `| ${c.name} | ${f(r['get 1024']!)} | ${f(r['get 102400']!)} | ${f(r['put 1024']!)} | ${f(r['put 102400']!)} |`;
});
const load = os.loadavg().map((l) => l.toFixed(2)).join(' ');
const stamp = new Date().toISOString().slice(0, 16).replace('T', ' ');
const lines = [
  `## ${stamp} — load ${load}; Node ${process.version}`, '',
  `${OBJECTS} objects of each size; CPU µs per operation (hits: median of ${ROUNDS} rounds of ${OPS} reads; fills: ${Math.min(OPS, 2000)} stores, each awaited).`, '',
  '| store | hit 1 KiB | hit 100 KiB | fill 1 KiB | fill 100 KiB |', '|---|---|---|---|---|', ...rows, '', '',
].join('\n');
console.log(lines);
const file = join(here, 'results', 'cache-stores.md');
const previous = existsSync(file) ? readFileSync(file, 'utf8').replace(/^# .*\n\n/, '') : '';
writeFileSync(file, `# Node-wide cache tier candidates (bench/cache-stores.ts)\n\n${lines}${previous}`);
process.exit(0);
