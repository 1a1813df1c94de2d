// The object cache: a byte-bounded LRU memory tier (lru-cache), an optional
// disk tier the memory tier spills into, and the purge indexes.
//
// Purges must apply in well under a millisecond even on 100,000 objects, so:
// - path purges delete through an index (endpoint → path → keys): exact, O(matches),
//   and a path has few variants; they also record a generation for the path, so a
//   fill that began before the purge (a miss or a prefetch in flight) cannot store
//   the old object after it;
// - tag purges record a purge generation for the tag (O(1), however many objects
//   carry it): an object stored from a fetch that began before its tag's last
//   purge counts as purged on lookup and is dropped then;
// - "all" and wildcard purges are bans (as in Varnish): recorded in O(1) with a
//   generation number and checked lazily when an older object is looked up.
// A background "lurker" then deletes what tag purges and bans cover, in slices
// of 2,000 objects per event-loop turn.
import { LRUCache } from 'lru-cache';
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { compilePathGlob, type PathMatcher } from '../../../shared/src/match/glob.ts';
import type { UrlSlot } from '../metrics/traffic.ts';

export interface CachedObject {
  key: string;
  primaryKey: string;
  endpointId: string;
  /** Request path without query: the unit of path purges. */
  path: string;
  tags: string[];
  status: number;
  /** Stored response headers, lower-case names, hop-by-hop and Age removed. */
  headers: [string, string][];
  body: Buffer | null;
  size: number;
  requestTimeMs: number;
  responseTimeMs: number;
  correctedInitialAgeMs: number;
  lifetimeMs: number;
  /** must-revalidate, proxy-revalidate or s-maxage: never served stale. */
  mustRevalidate: boolean;
  /** Response no-cache: stored but validated on every use. */
  noCache: boolean;
  staleWhileRevalidateMs: number;
  staleIfErrorMs: number;
  etag: string | undefined;
  lastModified: string | undefined;
  /** What If-Modified-Since is compared with: Last-Modified, or the Date without one; null: never (Last-Modified invalid). Absent: never. */
  modifiedMs?: number | null;
  /** Lower-case names from Vary, null when the response has no Vary. */
  varyNames: string[] | null;
  /** Request header values for varyNames when stored. */
  varyValues: string;
  /** public, s-maxage or must-revalidate: may answer requests carrying Authorization. */
  authorizationAllowed: boolean;
  /** Generation at which the fetch that produced it started (for bans). */
  generation: number;
  /** Generation up to which bans have already been checked for this object. */
  checkedGeneration: number;
  cacheRuleId: string | null;
  /** Cache-Control sent to viewers instead of the origin's (rule browser_ttl_seconds), null to pass the origin's. */
  browserCacheControl: string | null;
  /** Emit X-Cache-Status (the rule's cache_status_header). */
  statusHeader: boolean;
  /** Flat header list for a hit, rebuilt when the whole-second Age changes. */
  hitHeaders: string[] | null;
  hitHeadersAge: number;
  /** This object's top-URL counter in the current traffic window (see TrafficCounters.record). */
  urlSlot?: UrlSlot | null;
  /** Set on an encoded variant the edge made of a stored object (variants.ts): its coding. Ranges are served from the identity object. */
  coding?: string;
  /** The hit head after the response policies' request-independent part (the exit's, kept while hitHeaders and the policies stay). */
  shapedHit?: { from: string[]; by: object; headers: string[] } | null;
}

interface Ban {
  generation: number;
  /** null matches every object of the endpoint (purge all). */
  matcher: PathMatcher | null;
  atMs: number;
  /** The lurker has deleted the objects it covered. */
  swept: boolean;
}

interface TagPurge {
  generation: number;
  atMs: number;
  /** The lurker has deleted the objects it covered. */
  swept: boolean;
}

interface EndpointPurgeState {
  bans: Ban[];
  /** Tag → its last purge. */
  tags: Map<string, TagPurge>;
  /** Path → its last purge (its objects were deleted at once; this stops fills begun before it). */
  paths: Map<string, TagPurge>;
  /** Newest ban or tag purge: objects of a later generation skip every check. */
  latestBanGeneration: number;
}

/**
 * How long a swept ban, tag or path purge is still checked: a fetch that began
 * before it may store its (purged) object after the lurker passed, so the record
 * must outlive any origin fetch.
 */
const PURGE_RECORD_GRACE_MS = 10 * 60_000;

const OBJECT_OVERHEAD = 600; // bytes of bookkeeping per object counted against the memory budget

export interface CacheStoreOptions {
  memoryBytes: number;
  diskBytes: number;
  diskDir: string | null;
}

interface DiskEntry {
  file: string;
  meta: CachedObject;
  ready: boolean;
}

export class CacheStore {
  readonly memory: LRUCache<string, CachedObject>;
  private readonly varyByPrimary = new Map<string, string[]>();
  private readonly pathIndex = new Map<string, Map<string, Set<string>>>();
  private readonly tagIndex = new Map<string, Map<string, Set<string>>>();
  private readonly purgeState = new Map<string, EndpointPurgeState>();
  private generationCounter = 1;
  private readonly disk: DiskTier | null;
  private lurkerScheduled = false;
  /** Lurker runs under way (for settled()). */
  private readonly lurks = new Set<Promise<void>>();
  /** Set when an object is removed on purpose so dispose does not spill it to disk. */
  private deleting = false;

  constructor(options: CacheStoreOptions) {
    this.disk = options.diskBytes > 0 && options.diskDir ? new DiskTier(options.diskDir, options.diskBytes, (o) => this.unindex(o)) : null;
    this.memory = new LRUCache<string, CachedObject>({
      maxSize: Math.max(1, options.memoryBytes),
      sizeCalculation: (o) => o.size + o.key.length * 2 + OBJECT_OVERHEAD,
      // Objects larger than the whole budget are never stored rather than thrashing it.
      maxEntrySize: Math.max(1, options.memoryBytes),
      disposeAfter: (o, _key, reason) => {
        if (reason === 'set') return; // replaced by set(): indexes were handled there
        if (reason === 'evict' && this.disk && !this.deleting) this.disk.put(o);
        else this.unindex(o);
      },
    });
  }

  /** A monotonic counter; an object stored from a fetch that began before a ban is subject to it. */
  get currentGeneration(): number {
    return this.generationCounter;
  }

  nextGeneration(): number {
    return ++this.generationCounter;
  }

  get objectCount(): number {
    return this.memory.size + (this.disk?.count ?? 0);
  }

  get memoryBytes(): number {
    return this.memory.calculatedSize;
  }

  get diskBytes(): number {
    return this.disk?.bytes ?? 0;
  }

  get hasDisk(): boolean {
    return this.disk !== null;
  }

  /**
   * Resolves once the background work started so far is done: lurker sweeps
   * after tag purges and bans, and the disk tier's file writes and deletions.
   */
  async settled(): Promise<void> {
    for (;;) {
      if (this.lurks.size > 0) await Promise.all(this.lurks);
      else if (this.disk !== null && this.disk.busy) await this.disk.settled();
      else return;
    }
  }

  /** Vary names last seen for a primary key (null: no Vary). */
  varyFor(primaryKey: string): string[] | undefined {
    return this.varyByPrimary.get(primaryKey);
  }

  /** Synchronous memory lookup; undefined on miss or when a ban covers the object. */
  get(key: string): CachedObject | undefined {
    const o = this.memory.get(key);
    if (o === undefined) return undefined;
    if (o.checkedGeneration < this.generationCounter && this.isBanned(o)) {
      this.delete(o);
      return undefined;
    }
    return o;
  }

  /** Disk lookup after a memory miss; promotes the object to memory. */
  async getFromDisk(key: string): Promise<CachedObject | undefined> {
    if (!this.disk) return undefined;
    const o = await this.disk.get(key);
    if (!o) return undefined;
    if (this.isBanned(o)) {
      this.delete(o);
      return undefined;
    }
    this.disk.forget(key);
    this.memory.set(key, o);
    return o;
  }

  /** Stores the object; false when a purge issued while it was being fetched covers it. */
  set(o: CachedObject): boolean {
    if (this.isBanned(o)) return false;
    const old = this.memory.peek(o.key);
    if (old) this.delete(old);
    else if (this.disk?.has(o.key)) this.disk.remove(o.key);
    if (o.varyNames) this.varyByPrimary.set(o.primaryKey, o.varyNames);
    else if (this.varyByPrimary.has(o.primaryKey)) this.varyByPrimary.delete(o.primaryKey);
    this.memory.set(o.key, o);
    if (!this.memory.has(o.key)) return false; // too large for the memory tier
    addToIndex(this.pathIndex, o.endpointId, o.path, o.key);
    for (const tag of o.tags) addToIndex(this.tagIndex, o.endpointId, tag, o.key);
    return true;
  }

  delete(o: CachedObject): void {
    this.deleting = true;
    try {
      if (this.memory.peek(o.key) === o) this.memory.delete(o.key);
      else if (this.disk?.has(o.key)) this.disk.remove(o.key);
    } finally {
      this.deleting = false;
    }
    this.unindex(o);
  }

  private unindex(o: CachedObject): void {
    // Only drop index entries if this object is no longer stored anywhere under its key.
    if (this.memory.peek(o.key) !== undefined || this.disk?.has(o.key)) return;
    removeFromIndex(this.pathIndex, o.endpointId, o.path, o.key);
    for (const tag of o.tags) removeFromIndex(this.tagIndex, o.endpointId, tag, o.key);
  }

  private deleteKey(key: string): number {
    const o = this.memory.peek(key) ?? this.disk?.peekMeta(key);
    if (!o) return 0;
    this.delete(o);
    return 1;
  }

  /**
   * Removes every object stored for the exact path (all query variants and Vary variants), and records the
   * path's purge generation: an object of the path from a fetch that began before it is not stored.
   */
  purgePath(endpointId: string, path: string): number {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    state.paths.delete(path); // kept in purge order, oldest first, for the lurker's expiry
    state.paths.set(path, { generation, atMs: Date.now(), swept: true });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
    const keys = this.pathIndex.get(endpointId)?.get(path);
    if (!keys) return 0;
    let n = 0;
    for (const key of [...keys]) n += this.deleteKey(key);
    return n;
  }

  /**
   * O(1): records the tag's purge generation; objects carrying the tag that were
   * fetched before it are misses from now on and a lurker frees them. Returns how
   * many stored objects carry the tag (all of them are purged).
   */
  purgeTag(endpointId: string, tag: string): number {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    state.tags.set(tag, { generation, atMs: Date.now(), swept: false });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
    return this.tagIndex.get(endpointId)?.get(tag)?.size ?? 0;
  }

  /** O(1): bans everything the endpoint holds now; a lurker reclaims the memory. */
  purgeAll(endpointId: string): void {
    this.addBan(endpointId, null);
  }

  /** O(1): bans paths matching the glob; a lurker reclaims the memory. */
  purgeWildcard(endpointId: string, pattern: string): void {
    this.addBan(endpointId, compilePathGlob(pattern));
  }

  endpointIds(): string[] {
    return [...new Set([...this.pathIndex.keys(), ...this.purgeState.keys()])];
  }

  private purgeStateFor(endpointId: string): EndpointPurgeState {
    let state = this.purgeState.get(endpointId);
    if (!state) {
      state = { bans: [], tags: new Map(), paths: new Map(), latestBanGeneration: 0 };
      this.purgeState.set(endpointId, state);
    }
    return state;
  }

  private addBan(endpointId: string, matcher: PathMatcher | null): void {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    if (matcher === null) {
      // An "all" ban supersedes every older ban, tag purge and path purge.
      state.bans = [];
      state.tags.clear();
      state.paths.clear();
    }
    state.bans.push({ generation, matcher, atMs: Date.now(), swept: false });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
  }

  private isBanned(o: CachedObject): boolean {
    const state = this.purgeState.get(o.endpointId);
    if (state && state.latestBanGeneration > o.generation && coveredBy(o, state.bans, state.tags, state.paths)) return true;
    o.checkedGeneration = this.generationCounter;
    return false;
  }

  /** Walks the banned endpoints' objects in slices so no single turn blocks traffic. */
  private scheduleLurker(): void {
    if (this.lurkerScheduled) return;
    this.lurkerScheduled = true;
    const run = new Promise<void>((resolve) => setImmediate(() => this.lurk(resolve)));
    this.lurks.add(run);
    void run.then(() => this.lurks.delete(run));
  }

  private lurk(done: () => void): void {
    this.lurkerScheduled = false;
    const steps = this.lurkSteps();
    const step = (): void => {
      if (!steps.next().done) setImmediate(step);
      else done();
    };
    step();
  }

  private *lurkSteps(): Generator<void> {
    const SLICE = 2000;
    let done = 0;
    const now = Date.now();
    for (const [endpointId, state] of this.purgeState) {
      // Tag purges: walk only the objects carrying the tag.
      for (const [tag, purge] of state.tags) {
        if (purge.swept) continue;
        const keys = this.tagIndex.get(endpointId)?.get(tag);
        for (const key of keys ? [...keys] : []) {
          const o = this.memory.peek(key) ?? this.disk?.peekMeta(key);
          if (o && o.generation < purge.generation) this.delete(o);
          if (++done % SLICE === 0) yield;
        }
        purge.swept = true;
      }
      for (const [tag, purge] of state.tags) if (purge.swept && now - purge.atMs > PURGE_RECORD_GRACE_MS) state.tags.delete(tag);
      // Path purges deleted their objects at once; their records expire oldest first.
      for (const [path, purge] of state.paths) {
        if (now - purge.atMs <= PURGE_RECORD_GRACE_MS) break;
        state.paths.delete(path);
      }
      state.bans = state.bans.filter((b) => !b.swept || now - b.atMs < PURGE_RECORD_GRACE_MS);
      const bans = state.bans.filter((b) => !b.swept);
      if (bans.length === 0) continue;
      const newest = bans[bans.length - 1].generation;
      const paths = this.pathIndex.get(endpointId);
      const keys: string[] = [];
      if (paths) for (const set of paths.values()) for (const key of set) keys.push(key);
      for (const key of keys) {
        const o = this.memory.peek(key) ?? this.disk?.peekMeta(key);
        if (o && o.generation < newest && coveredBy(o, bans, null, null)) this.delete(o);
        if (++done % SLICE === 0) yield;
      }
      // Every object older than these bans has been checked; the bans stay a while for fetches still in flight.
      for (const b of bans) b.swept = true;
    }
  }

  /** Number of keys under a path (for tests and health). */
  keysForPath(endpointId: string, path: string): number {
    return this.pathIndex.get(endpointId)?.get(path)?.size ?? 0;
  }

  clear(): void {
    this.deleting = true;
    this.memory.clear();
    this.deleting = false;
    this.disk?.clear();
    this.pathIndex.clear();
    this.tagIndex.clear();
    this.varyByPrimary.clear();
    this.purgeState.clear();
  }
}

/** True when a ban, a tag purge or a path purge issued after the object's fetch began covers it. */
function coveredBy(o: CachedObject, bans: Ban[], tags: Map<string, TagPurge> | null, paths: Map<string, TagPurge> | null): boolean {
  for (const ban of bans) {
    if (ban.generation > o.generation && (ban.matcher === null || ban.matcher(o.path))) return true;
  }
  if (paths !== null && paths.size > 0) {
    const p = paths.get(o.path);
    if (p !== undefined && p.generation > o.generation) return true;
  }
  if (tags !== null && tags.size > 0) {
    for (const tag of o.tags) {
      const p = tags.get(tag);
      if (p !== undefined && p.generation > o.generation) return true;
    }
  }
  return false;
}

function addToIndex(index: Map<string, Map<string, Set<string>>>, endpointId: string, name: string, key: string): void {
  let byName = index.get(endpointId);
  if (!byName) index.set(endpointId, (byName = new Map()));
  let keys = byName.get(name);
  if (!keys) byName.set(name, (keys = new Set()));
  keys.add(key);
}

function removeFromIndex(index: Map<string, Map<string, Set<string>>>, endpointId: string, name: string, key: string): void {
  const byName = index.get(endpointId);
  const keys = byName?.get(name);
  if (!keys) return;
  keys.delete(key);
  if (keys.size === 0) byName!.delete(name);
}

/**
 * Disk tier: one file per object (body bytes only, named by SHA-256 of the key);
 * metadata stays in memory. It starts empty on every start (the directory is
 * wiped), so a restart can never serve an object whose purge it missed.
 */
class DiskTier {
  private readonly entries = new Map<string, DiskEntry>();
  bytes = 0;
  private readonly dir: string;
  private readonly maxBytes: number;
  private readonly onDrop: (o: CachedObject) => void;
  /** File writes and deletions under way. */
  private readonly pending = new Set<Promise<void>>();

  constructor(dir: string, maxBytes: number, onDrop: (o: CachedObject) => void) {
    this.dir = dir;
    this.maxBytes = maxBytes;
    this.onDrop = onDrop;
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
  }

  get count(): number {
    return this.entries.size;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  peekMeta(key: string): CachedObject | undefined {
    return this.entries.get(key)?.meta;
  }

  put(o: CachedObject): void {
    if (!o.body || o.size > this.maxBytes) {
      this.onDrop(o);
      return;
    }
    const file = join(this.dir, createHash('sha256').update(o.key).digest('hex'));
    const body = o.body;
    const meta: CachedObject = { ...o, body: null, hitHeaders: null, shapedHit: null };
    const entry: DiskEntry = { file, meta, ready: false };
    this.entries.set(o.key, entry);
    this.bytes += o.size;
    this.track(writeFile(file, body).then(
      () => { entry.ready = true; },
      () => { this.remove(o.key); },
    ));
    while (this.bytes > this.maxBytes) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      const victim = this.entries.get(oldest.value)!;
      this.remove(oldest.value);
      this.onDrop(victim.meta);
    }
  }

  async get(key: string): Promise<CachedObject | undefined> {
    const entry = this.entries.get(key);
    if (!entry || !entry.ready) return undefined;
    try {
      const body = await readFile(entry.file);
      if (this.entries.get(key) !== entry) return undefined; // purged meanwhile
      return { ...entry.meta, body };
    } catch {
      return undefined;
    }
  }

  /** Drops the entry after promotion to memory (the file goes too). */
  forget(key: string): void {
    this.remove(key);
  }

  remove(key: string): void {
    const entry = this.entries.get(key);
    if (!entry) return;
    this.entries.delete(key);
    this.bytes -= entry.meta.size;
    this.track(unlink(entry.file).catch(() => {}));
  }

  private track(op: Promise<void>): void {
    this.pending.add(op);
    void op.finally(() => this.pending.delete(op));
  }

  get busy(): boolean {
    return this.pending.size > 0;
  }

  /** Resolves when every write and deletion started so far (and any they started) has finished. */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all(this.pending);
  }

  clear(): void {
    for (const key of [...this.entries.keys()]) this.remove(key);
  }
}
