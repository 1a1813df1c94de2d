// The node-wide tier: one LMDB environment (lmdb-js) in DATA_DIR, opened by
// every worker of the node, kept across restarts. LMDB is memory-mapped and
// multi-process (readers never block, one writer at a time across processes),
// so the size bound holds under concurrent writers: eviction happens inside
// the write transaction that stores, against the byte count kept in the same
// environment.
//
// Layout (six named databases):
//   data:    sha256(key) → [f64 sequence][u32 meta length][meta utf8][body]   (one read per hit)
//   entries: sha256(key) → { k: key, b: bytes, s: sequence, e: endpoint, p: path, t: tags }
//   order:   sequence → sha256(key)                               (oldest first)
//   index:   ['p' or 't', endpoint, sha256(path or tag), hex(sha256(key))] → 1   (path and tag purges)
//   purges:  [endpoint, generation] → { at, target }              (recent purges, against fills in flight)
//   state:   'format' | 'bytes' | 'seq' | 'gen'
// A purge is applied once for the node (it is idempotent: a second worker
// applying the same purge finds nothing left and records a newer generation,
// which only refuses fills begun before it).
// Keys are hashed because LMDB keys are limited to 1,978 bytes and cache keys
// are not. Eviction is oldest-stored first with a second chance: a read of an
// entry in the oldest quarter moves it to the young end (so a hot object is not
// evicted by a stream of cold ones), which keeps hits read-only otherwise. A hit
// is one read: the record carries its sequence, and the quarter's boundary is
// re-read every WINDOW_READS reads and after every store of this process.
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { coveredByRecord, PURGE_RECORD_GRACE_MS, softPurgedAt, targets, type EntryIndex, type PurgeRecord, type PurgeTarget } from './purge.ts';
import { ENTRY_OVERHEAD, entryBytes, type ObjectStore, type StoredEntry } from './store.ts';

/** Bumped when the layout changes: a store of another format is emptied at open. */
export const FORMAT = 3;
const FILE = 'cache.mdb';
const CHECK_TIMEOUT_MS = 60_000;
const WINDOW_READS = 256;
const HEAD = 20; // f64 sequence + u32 meta length + f64 stale since (a soft purge; 0: none)

interface Entry {
  /** The cache key. */
  k: string;
  /** entryBytes of the entry. */
  b: number;
  /** Its place in the eviction order. */
  s: number;
  /** Endpoint, path and tags (the purge index). */
  e: string;
  p: string;
  t: string[];
}

export interface LmdbStoreOptions {
  /** Directory holding the store (created if missing). */
  dir: string;
  maxBytes: number;
}

function hashOf(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

const nameHash = (name: string): string => createHash('sha256').update(name).digest('base64url');
/** ['p' or 't', endpoint, name hash, entry id], or a prefix of one. */
type Row = string[];
const pathRow = (endpointId: string, path: string): Row => ['p', endpointId, nameHash(path)];
const tagRow = (endpointId: string, tag: string): Row => ['t', endpointId, nameHash(tag)];
/** The range of index rows that extend prefix (U+FFFF sorts after every hash and id). */
const rangeOf = (prefix: Row): { start: Row; end: Row } => ({ start: prefix, end: [...prefix, '\uffff'] });
const rowFor = (prefix: Row, id: string): Row => [...prefix, id];

export class LmdbStore implements ObjectStore {
  #evictions = 0;
  readonly tier = 'node' as const;
  readonly maxBytes: number;
  readonly #env: RootDatabase;
  readonly #data: Database<Buffer, Buffer>;
  readonly #entries: Database<Entry, Buffer>;
  readonly #order: Database<Buffer, number>;
  readonly #state: Database<number, string>;
  readonly #index: Database<number, Row>;
  readonly #purges: Database<Omit<PurgeRecord, 'g'>, [string, number]>;
  /** Entries this process has asked to move to the young end and not yet moved. */
  readonly #touching = new Set<string>();
  #closed = false;
  /** Records of a sequence below this are in the oldest quarter (refreshed every WINDOW_READS reads). */
  #oldQuarter = 0;
  #readsToWindow = 0;

  private constructor(dir: string, maxBytes: number) {
    this.maxBytes = Math.max(1, Math.floor(maxBytes));
    mkdirSync(dir, { recursive: true });
    // Synchronous commits stay on: LMDB's no-sync modes can leave a file that
    // crashes the reader after a power loss, and writes here are fills, not hits.
    this.#env = open({ path: join(dir, FILE), maxDbs: 6, compression: false });
    this.#data = this.#env.openDB<Buffer, Buffer>('data', { encoding: 'binary', keyEncoding: 'binary' });
    this.#entries = this.#env.openDB<Entry, Buffer>('entries', { keyEncoding: 'binary' });
    this.#order = this.#env.openDB<Buffer, number>('order', { encoding: 'binary', });
    this.#state = this.#env.openDB<number, string>('state', {});
    this.#index = this.#env.openDB<number, Row>('index', {});
    this.#purges = this.#env.openDB<Omit<PurgeRecord, 'g'>, [string, number]>('purges', {});
  }

  /** Opens (or creates) the store; a store of another format is emptied. */
  static async open(options: LmdbStoreOptions): Promise<LmdbStore> {
    const store = new LmdbStore(options.dir, options.maxBytes);
    if (store.#state.get('format') !== FORMAT) {
      await store.clear();
    }
    await store.#fitBound();
    return store;
  }

  /** Opens the store as it is, for the check: null (closed) when it is empty or of another format. */
  static async openForCheck(dir: string): Promise<LmdbStore | null> {
    const store = new LmdbStore(dir, Number.MAX_SAFE_INTEGER);
    if (store.#state.get('format') === FORMAT) return store;
    await store.close();
    return null;
  }

  /**
   * Opens the store after a child process has read all of it: a damaged file
   * can crash LMDB itself (a segmentation fault, not an exception), so the
   * check runs apart and a store it cannot read is removed and started empty,
   * with one line on `log`.
   */
  static async openChecked(options: LmdbStoreOptions, log: (line: string) => void = () => {}): Promise<LmdbStore> {
    const problem = await checkInChild(options.dir);
    if (problem !== null) {
      log(`node cache at ${join(options.dir, FILE)} could not be read (${problem}); starting empty`);
      removeStoreFiles(options.dir);
    }
    return LmdbStore.open(options);
  }

  bytes(): number {
    return this.#state.get('bytes') ?? 0;
  }

  evictions(): number {
    return this.#evictions;
  }

  count(): number {
    return this.#entries.getCount();
  }

  generation(): number {
    return this.#state.get('gen') ?? 1;
  }

  get(key: string): StoredEntry | undefined {
    const hash = hashOf(key);
    // getBinaryFast reads into lmdb-js's shared buffer (valid until the next read): copy what is kept.
    const shared = this.#data.getBinaryFast(hash);
    if (shared === undefined || shared.length < HEAD) return undefined;
    const metaLength = shared.readUInt32LE(8);
    if (HEAD + metaLength > shared.length) return undefined;
    const meta = shared.toString('utf8', HEAD, HEAD + metaLength);
    const body = Buffer.allocUnsafe(shared.length - HEAD - metaLength);
    shared.copy(body, 0, HEAD + metaLength);
    const seq = shared.readDoubleLE(0);
    const staleSince = shared.readDoubleLE(12);
    if (--this.#readsToWindow <= 0) this.#refreshWindow();
    if (seq < this.#oldQuarter) this.#secondChance(hash, key);
    return staleSince > 0 ? { meta, body, staleSince } : { meta, body };
  }

  async put(key: string, meta: string, body: Buffer, index: EntryIndex): Promise<boolean> {
    const hash = hashOf(key);
    const size = entryBytes(key, meta, body);
    const metaBytes = Buffer.from(meta, 'utf8');
    const record = Buffer.allocUnsafe(HEAD + metaBytes.length + body.length);
    record.writeUInt32LE(metaBytes.length, 8);
    metaBytes.copy(record, HEAD);
    body.copy(record, HEAD + metaBytes.length);
    const stored = await this.#env.transaction(() => {
      const records = this.#recordsAfter(index.endpointId, index.generation);
      if (coveredByRecord(records, index)) return false;
      record.writeDoubleLE(softPurgedAt(records, index), 12);
      let bytes = this.#state.get('bytes') ?? 0;
      bytes -= this.#remove(hash);
      if (size > this.maxBytes) {
        this.#state.put('bytes', bytes);
        return false;
      }
      bytes = this.#evictUntil(bytes, this.maxBytes - size);
      const seq = (this.#state.get('seq') ?? 0) + 1;
      record.writeDoubleLE(seq, 0);
      this.#data.put(hash, record);
      this.#entries.put(hash, { k: key, b: size, s: seq, e: index.endpointId, p: index.path, t: [...index.tags] });
      this.#order.put(seq, hash);
      const id = hash.toString('hex');
      this.#index.put(rowFor(pathRow(index.endpointId, index.path), id), 1);
      for (const tag of index.tags) this.#index.put(rowFor(tagRow(index.endpointId, tag), id), 1);
      this.#state.put('seq', seq);
      this.#state.put('bytes', bytes + size);
      return true;
    });
    this.#readsToWindow = 0;
    return stored;
  }

  async delete(key: string): Promise<boolean> {
    const hash = hashOf(key);
    return this.#env.transaction(() => {
      const freed = this.#remove(hash);
      if (freed === 0) return false;
      this.#state.put('bytes', (this.#state.get('bytes') ?? 0) - freed);
      return true;
    });
  }

  async purge(endpointId: string, target: PurgeTarget, soft = false): Promise<number> {
    return this.#env.transaction(() => {
      const now = Date.now();
      const g = this.generation() + 1;
      this.#state.put('gen', g);
      for (const { key, value } of this.#purges.getRange({ start: [endpointId, 0], end: [endpointId, g] })) {
        if (now - value.at <= PURGE_RECORD_GRACE_MS) break; // recorded in generation order, so in time order
        this.#purges.remove(key);
      }
      this.#purges.put([endpointId, g], soft ? { at: now, target, soft } : { at: now, target });
      const prefix: Row = target.kind === 'path' ? pathRow(endpointId, target.path) : target.kind === 'tag' ? tagRow(endpointId, target.tag) : ['p', endpointId];
      const hashes: Buffer[] = [];
      for (const row of this.#index.getKeys(rangeOf(prefix))) {
        const hash = Buffer.from(row[3] ?? '', 'hex');
        if (target.kind === 'glob' || target.kind === 'all') {
          const entry = this.#entries.get(hash);
          if (entry === undefined || !targets(target, entry.p, entry.t)) continue;
        }
        hashes.push(hash);
      }
      if (soft) {
        // Marked stale in place: the entry stays, with when it went stale in its record's head.
        let marked = 0;
        for (const hash of hashes) {
          const held = this.#data.getBinary(hash);
          if (held === undefined || held.length < HEAD) continue;
          const copy = Buffer.from(held);
          copy.writeDoubleLE(now, 12);
          this.#data.put(hash, copy);
          marked++;
        }
        return marked;
      }
      let freed = 0;
      let removed = 0;
      for (const hash of hashes) {
        const bytes = this.#remove(hash);
        if (bytes > 0) removed++;
        freed += bytes;
      }
      if (freed > 0) this.#state.put('bytes', (this.#state.get('bytes') ?? 0) - freed);
      return removed;
    });
  }

  *keys(): IterableIterator<string> {
    for (const { value } of this.#entries.getRange({})) yield value.k;
  }

  async clear(): Promise<void> {
    await this.#env.transaction(() => {
      for (const db of [this.#data, this.#entries, this.#order, this.#state, this.#index, this.#purges] as Database<unknown, Buffer | number | string | [string, number]>[]) {
        for (const key of db.getKeys({})) db.remove(key);
      }
      this.#state.put('format', FORMAT);
      this.#state.put('bytes', 0);
      this.#state.put('seq', 0);
      this.#state.put('gen', 1);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#env.flushed;
    await this.#env.close();
  }

  /** Reads every record and checks that data, entries, order and the byte count agree. */
  walk(): StoreWalk {
    const problems: string[] = [];
    let entries = 0;
    let bytes = 0;
    for (const { key: hash, value: entry } of this.#entries.getRange({})) {
      entries++;
      bytes += entry.b;
      const record = this.#data.getBinary(hash);
      if (record === undefined) problems.push(`no data for ${entry.k}`);
      else if (Buffer.byteLength(entry.k) + record.length - HEAD + ENTRY_OVERHEAD !== entry.b) problems.push(`size of ${entry.k} disagrees`);
      else if (record.readDoubleLE(0) !== entry.s) problems.push(`sequence of ${entry.k} disagrees`);
      const ordered = this.#order.getBinary(entry.s);
      if (ordered === undefined || !hash.equals(ordered)) problems.push(`${entry.k} missing from the order`);
      if (problems.length > 10) break;
    }
    if (problems.length === 0 && bytes !== this.bytes()) problems.push(`byte count ${this.bytes()} but entries hold ${bytes}`);
    if (problems.length === 0 && this.#data.getCount() !== entries) problems.push(`${this.#data.getCount()} data records for ${entries} entries`);
    const pathRows = this.#index.getKeysCount(rangeOf(['p']));
    if (problems.length === 0 && pathRows !== entries) problems.push(`${pathRows} path index rows for ${entries} entries`);
    return { entries, bytes, problems };
  }

  /** Removes the entry under hash inside the open write transaction; its bytes (0 when absent). */
  #remove(hash: Buffer): number {
    const entry = this.#entries.get(hash);
    if (entry === undefined) return 0;
    this.#drop(hash, entry);
    this.#order.remove(entry.s);
    return entry.b;
  }

  /** Removes the entry's record, its bookkeeping and its index rows (not its order row). */
  #drop(hash: Buffer, entry: Entry): void {
    this.#data.remove(hash);
    this.#entries.remove(hash);
    const id = hash.toString('hex');
    this.#index.remove(rowFor(pathRow(entry.e, entry.p), id));
    for (const tag of entry.t) this.#index.remove(rowFor(tagRow(entry.e, tag), id));
  }

  /** The endpoint's purge records newer than generation. */
  #recordsAfter(endpointId: string, generation: number): PurgeRecord[] {
    const records: PurgeRecord[] = [];
    for (const { key, value } of this.#purges.getRange({ start: [endpointId, generation + 1], end: [endpointId, Number.MAX_SAFE_INTEGER] })) {
      records.push(value.soft === true ? { g: key[1], at: value.at, target: value.target, soft: true } : { g: key[1], at: value.at, target: value.target });
    }
    return records;
  }

  /** Evicts oldest-first inside the open write transaction until bytes ≤ target; the bytes left. */
  #evictUntil(bytes: number, target: number): number {
    while (bytes > target) {
      let evicted = false;
      for (const { key: seq, value: hash } of this.#order.getRange({ limit: 64 })) {
        const entry = this.#entries.get(hash);
        this.#order.remove(seq);
        if (entry === undefined || entry.s !== seq) continue; // a stale order row
        this.#drop(hash, entry);
        this.#evictions++;
        bytes -= entry.b;
        evicted = true;
        if (bytes <= target) break;
      }
      if (!evicted && this.#order.getKeysCount({ limit: 1 }) === 0) {
        // Nothing left to evict: the count drifted (a crash between processes cannot
        // cause it, but a hand-edited store can); the store is empty, so is its count.
        return 0;
      }
    }
    return bytes;
  }

  /** Brings bytes within maxBytes after an open with a smaller bound. */
  async #fitBound(): Promise<void> {
    if (this.bytes() <= this.maxBytes) return;
    await this.#env.transaction(() => {
      this.#state.put('bytes', this.#evictUntil(this.#state.get('bytes') ?? 0, this.maxBytes));
    });
  }

  /** Where the oldest quarter of the order ends, read again now. */
  #refreshWindow(): void {
    this.#readsToWindow = WINDOW_READS;
    const newest = this.#state.get('seq') ?? 0;
    let oldest = newest;
    for (const seq of this.#order.getKeys({ limit: 1 })) oldest = seq;
    this.#oldQuarter = oldest + (newest - oldest) / 4;
  }

  /** Moves a read entry of the oldest quarter to the young end (once at a time, asynchronously; its record is rewritten with the new sequence). */
  #secondChance(hash: Buffer, key: string): void {
    if (this.#touching.has(key) || this.#closed) return;
    this.#touching.add(key);
    this.#env.transaction(() => {
      const current = this.#entries.get(hash);
      const record = this.#data.getBinary(hash);
      if (current === undefined || record === undefined || current.s >= this.#oldQuarter) return;
      const seq = (this.#state.get('seq') ?? 0) + 1;
      record.writeDoubleLE(seq, 0);
      this.#data.put(hash, record);
      this.#order.remove(current.s);
      this.#order.put(seq, hash);
      this.#entries.put(hash, { ...current, s: seq });
      this.#state.put('seq', seq);
    }).catch(() => {}).finally(() => this.#touching.delete(key));
  }
}

export interface StoreWalk {
  entries: number;
  bytes: number;
  problems: string[];
}

export function removeStoreFiles(dir: string): void {
  rmSync(join(dir, FILE), { force: true });
  rmSync(join(dir, `${FILE}-lock`), { force: true });
}

/** Runs lmdb-store-check.ts on dir in a child; null when it read the whole store, else what went wrong. */
function checkInChild(dir: string): Promise<string | null> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [new URL('./lmdb-store-check.ts', import.meta.url).pathname, dir], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err = (err + s).slice(-300); });
    const timer = setTimeout(() => child.kill('SIGKILL'), CHECK_TIMEOUT_MS);
    child.on('error', (e) => { clearTimeout(timer); resolve(e.message); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(null);
      else resolve(signal ? `the check died of ${signal}` : err.trim().split('\n').pop() || `the check exited ${code}`);
    });
  });
}
