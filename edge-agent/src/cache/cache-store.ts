// The object cache: a byte-bounded LRU memory tier (lru-cache) per worker,
// an optional node-wide tier behind it (cache/lmdb-store.ts: one LMDB store
// shared by every worker of the node, written through on every store), and the
// purge indexes.
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
//
// The node tier applies every purge itself (exactly, through its own index),
// and each worker applies each purge to it before acknowledging. An object a
// worker reads from the node tier may have been stored by another worker that
// has not applied a purge this one has; so it carries the time at which its
// fill's generation began (startUs, never later than the fill's own start, on
// the host's monotonic clock, which every process of the node shares), and a
// purge this worker applied at or after that time covers it.
import { LRUCache } from 'lru-cache';
import { targets, type PurgeTarget } from './purge.ts';
import type { ObjectStore } from './store.ts';
import { systemClock, type Clock } from './clock.ts';
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
  /** Read from the node tier by this lookup (its first answer says so in Cache-Status; later hits are the memory tier's). */
  fromNodeTier?: boolean;
  /** Set on an encoded variant the edge made of a stored object (variants.ts): its coding. Ranges are served from the identity object. */
  coding?: string;
  /** The hit head after the response policies' request-independent part (the exit's, kept while hitHeaders and the policies stay). */
  shapedHit?: { from: string[]; by: object; headers: string[] } | null;
  /**
   * Set on the head of an object kept in slices (slices.ts): its body is empty, its headers and freshness are the
   * object's, and each slice is an entry of its own under sliceKey(head, n).
   */
  sliced?: SlicedHead;
}

/** What the head of an object kept in slices knows of them. */
export interface SlicedHead {
  /** The whole object's length (its Content-Range total). */
  total: number;
  /** Bytes per slice (the last may be shorter). */
  sliceBytes: number;
  /** Names this version's slices: a new version of the object (another validator) gets new slice keys. */
  version: string;
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

/** A soft purge: what it names is marked stale (revalidated before its next use), not removed. */
interface SoftPurge {
  generation: number;
  target: PurgeTarget;
  atMs: number;
  /** The lurker has marked the objects it covered. */
  swept: boolean;
}

interface EndpointPurgeState {
  bans: Ban[];
  /** Soft purges, oldest first. */
  soft: SoftPurge[];
  /** Newest soft purge: objects of a later generation skip their check. */
  latestSoftGeneration: number;
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

/** What one tier did, since the worker started (Prometheus reads them). */
export interface TierCounts {
  /** Lookups that reached the tier, and those it answered. */
  lookups: number;
  hits: number;
  /** Objects (and slices) stored in it, and their bytes. */
  fills: number;
  fillBytes: number;
}

const tierCounts = (): TierCounts => ({ lookups: 0, hits: 0, fills: 0, fillBytes: 0 });

export interface CacheStoreOptions {
  memoryBytes: number;
  /** The node-wide tier shared by the node's workers (null: memory only). */
  node?: ObjectStore | null;
  /** The wall clock objects' ages and purge times are read from (default the system's). */
  clock?: Clock;
}

/** What a worker records when its generation moves on (a purge): when (monotonic µs), and the node tier's generation then. */
interface GenerationStart {
  atUs: number;
  node: number;
}

/** The host's monotonic clock in µs: the same in every process of the node. */
const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

/** The fields of a CachedObject the node tier keeps in its metadata (the body is its bytes; the rest is per worker). */
type NodeMeta = Omit<CachedObject, 'body' | 'hitHeaders' | 'hitHeadersAge' | 'urlSlot' | 'shapedHit' | 'checkedGeneration' | 'generation' | 'fromNodeTier'> & { startUs: number };

const VARY_PREFIX = '\0vary ';

export class CacheStore {
  readonly memory: LRUCache<string, CachedObject>;
  private readonly varyByPrimary = new Map<string, string[]>();
  private readonly pathIndex = new Map<string, Map<string, Set<string>>>();
  private readonly tagIndex = new Map<string, Map<string, Set<string>>>();
  private readonly purgeState = new Map<string, EndpointPurgeState>();
  private generationCounter = 1;
  private readonly node: ObjectStore | null;
  /** The wall clock of the cache and the request path using it (clock.ts). */
  readonly now: Clock;
  /** When each recent generation began (for the objects this worker stores in the node tier). */
  private readonly generationStarts = new Map<number, GenerationStart>();
  private lurkerScheduled = false;
  /** Lurker runs under way (for settled()). */
  private readonly lurks = new Set<Promise<void>>();
  /** The node-tier write of each key under way (written()). */
  private readonly nodeWrites = new Map<string, Promise<void>>();
  /** Node-tier writes and purges under way (for settled()). */
  private readonly nodeWork = new Set<Promise<unknown>>();
  /** Purges the node tier failed to apply (the purge is then not acknowledged). */
  nodePurgeFailures = 0;
  /** Per tier: lookups, hits, fills (metrics). */
  readonly counts = { memory: tierCounts(), node: tierCounts() };
  /** Objects the memory tier dropped to stay within its bound. */
  memoryEvictions = 0;

  constructor(options: CacheStoreOptions) {
    this.node = options.node ?? null;
    this.now = options.clock ?? systemClock;
    this.generationStarts.set(1, { atUs: monotonicUs(), node: this.node?.generation() ?? 0 });
    this.memory = new LRUCache<string, CachedObject>({
      maxSize: Math.max(1, options.memoryBytes),
      sizeCalculation: (o) => o.size + o.key.length * 2 + OBJECT_OVERHEAD,
      // Objects larger than the whole budget are never stored rather than thrashing it.
      maxEntrySize: Math.max(1, options.memoryBytes),
      disposeAfter: (o, _key, reason) => {
        if (reason === 'set') return; // replaced by set(): indexes were handled there
        if (reason === 'evict') this.memoryEvictions++;
        this.unindex(o);
      },
    });
  }

  /** A monotonic counter; an object stored from a fetch that began before a ban is subject to it. */
  get currentGeneration(): number {
    return this.generationCounter;
  }

  nextGeneration(): number {
    const generation = ++this.generationCounter;
    this.generationStarts.set(generation, { atUs: monotonicUs(), node: this.node?.generation() ?? 0 });
    if (this.generationStarts.size > 10_000) {
      for (const g of this.generationStarts.keys()) {
        this.generationStarts.delete(g);
        if (this.generationStarts.size <= 5_000) break;
      }
    }
    return generation;
  }

  /** Objects held: the node tier's count when there is one (it holds every object), else the memory tier's. */
  get objectCount(): number {
    return this.node !== null ? this.node.count() : this.memory.size;
  }

  get memoryBytes(): number {
    return this.memory.calculatedSize;
  }

  get hasNodeTier(): boolean {
    return this.node !== null;
  }

  /** Bytes in the node-wide tier (0 without one). */
  get diskBytes(): number {
    return this.node?.bytes() ?? 0;
  }

  /** Entries the node tier removed to stay within its bound, by this process (0 without one). */
  get nodeEvictions(): number {
    return this.node?.evictions() ?? 0;
  }

  /**
   * Resolves once the background work started so far is done: lurker sweeps
   * after tag purges and bans, and the node tier's writes and purges.
   */
  async settled(): Promise<void> {
    for (;;) {
      if (this.lurks.size > 0) await Promise.all(this.lurks);
      else if (this.nodeWork.size > 0) await Promise.allSettled(this.nodeWork);
      else return;
    }
  }

  /** Vary names last seen for a primary key (null: no Vary), by this worker or (through the node tier) another. */
  varyFor(primaryKey: string): string[] | undefined {
    const names = this.varyByPrimary.get(primaryKey);
    if (names !== undefined || this.node === null) return names;
    const held = this.node.get(VARY_PREFIX + primaryKey);
    if (held === undefined) return undefined;
    const learned = JSON.parse(held.meta) as string[];
    this.varyByPrimary.set(primaryKey, learned);
    return learned;
  }

  /** Waits for the node-tier writes and purges under way, then closes the node tier. */
  async close(): Promise<void> {
    await this.settled();
    await this.node?.close();
  }

  private track(work: Promise<unknown>): Promise<unknown> {
    this.nodeWork.add(work);
    void work.catch(() => {}).finally(() => this.nodeWork.delete(work));
    return work;
  }

  /** Synchronous lookup (memory, then the node tier); undefined on miss or when a purge covers the object. */
  get(key: string): CachedObject | undefined {
    const o = this.memory.get(key);
    const memory = this.counts.memory;
    memory.lookups++;
    if (o === undefined) return this.node !== null ? this.fromNode(key) : undefined;
    memory.hits++;
    if (o.checkedGeneration < this.generationCounter && this.isBanned(o)) {
      this.delete(o);
      return undefined;
    }
    return o;
  }

  /**
   * A slice of an object kept in slices (slices.ts): from the node tier when there is one, never promoted to
   * this worker's memory (a long video would push every small hot object out of it), else from memory.
   */
  getPart(key: string): CachedObject | undefined {
    return this.node !== null ? this.fromNode(key, false) : this.get(key);
  }

  /** Stores a slice where getPart looks for it; false when a purge issued while it was being fetched covers it. */
  setPart(o: CachedObject): boolean {
    if (this.node === null) return this.set(o);
    if (this.isBanned(o)) return false;
    this.toNode(o);
    return true;
  }

  /** Removes what is stored under key from every tier (a slice of a version that is gone). */
  deletePart(key: string): void {
    this.deleteKey(key);
    if (this.node !== null) this.track(this.node.delete(key));
  }

  /** A node-tier lookup after a memory miss: promoted to this worker's memory (unless told not to) unless a purge it recorded covers it. */
  private fromNode(key: string, promote = true): CachedObject | undefined {
    const counts = this.counts.node;
    counts.lookups++;
    const held = this.node!.get(key);
    if (held === undefined) return undefined;
    let meta: NodeMeta;
    try {
      meta = JSON.parse(held.meta) as NodeMeta;
    } catch {
      return undefined;
    }
    const { startUs, ...fields } = meta;
    const o: CachedObject = { ...fields, body: held.body, generation: this.generationCounter, checkedGeneration: this.generationCounter, hitHeaders: null, hitHeadersAge: -1, fromNodeTier: true };
    if (this.purgedSince(o, startUs)) return undefined;
    counts.hits++;
    // Marked stale by a soft purge the node tier applied, or one this worker applied after the fill began.
    if (held.staleSince !== undefined) staleFrom(o, held.staleSince);
    this.softPurgedSince(o, startUs);
    if (!promote) return o;
    this.memory.set(key, o);
    if (this.memory.has(key)) this.index(o);
    return o;
  }

  /** Whether a purge this worker applied at or after startUs covers the object (one another worker stored). */
  private purgedSince(o: CachedObject, startUs: number): boolean {
    const state = this.purgeState.get(o.endpointId);
    if (state === undefined) return false;
    const after = (generation: number) => this.appliedSince(generation, startUs);
    for (const ban of state.bans) if (after(ban.generation) && (ban.matcher === null || ban.matcher(o.path))) return true;
    const p = state.paths.get(o.path);
    if (p !== undefined && after(p.generation)) return true;
    for (const tag of o.tags) {
      const purge = state.tags.get(tag);
      if (purge !== undefined && after(purge.generation)) return true;
    }
    return false;
  }

  /** Marks the object (read from the node tier) stale for each soft purge this worker applied at or after startUs that names it. */
  private softPurgedSince(o: CachedObject, startUs: number): void {
    const state = this.purgeState.get(o.endpointId);
    if (state === undefined || state.soft.length === 0) return;
    for (const s of state.soft) {
      if (this.appliedSince(s.generation, startUs) && targets(s.target, o.path, o.tags)) staleFrom(o, s.atMs);
    }
  }

  /** Whether this worker applied the purge that began the generation at or after startUs (a node-tier fill's start). */
  private appliedSince(generation: number, startUs: number): boolean {
    return (this.generationStarts.get(generation)?.atUs ?? Infinity) >= startUs;
  }

  private index(o: CachedObject): void {
    addToIndex(this.pathIndex, o.endpointId, o.path, o.key);
    for (const tag of o.tags) addToIndex(this.tagIndex, o.endpointId, tag, o.key);
  }

  /** Writes the object through to the node tier (with its Vary names when it has them). */
  private toNode(o: CachedObject): void {
    if (this.node === null || o.body === null) return;
    const start = this.generationStarts.get(o.generation) ?? { atUs: 0, node: 0 };
    const { body, hitHeaders: _h, hitHeadersAge: _a, urlSlot: _u, shapedHit: _s, checkedGeneration: _c, generation: _g, fromNodeTier: _f, ...fields } = o;
    const meta: NodeMeta = { ...fields, startUs: start.atUs };
    const index = { endpointId: o.endpointId, path: o.path, tags: o.tags, generation: start.node };
    const counts = this.counts.node;
    counts.fills++;
    counts.fillBytes += body.length;
    const writes = [this.track(this.node.put(o.key, JSON.stringify(meta), body, index))];
    if (o.varyNames !== null) writes.push(this.track(this.node.put(VARY_PREFIX + o.primaryKey, JSON.stringify(o.varyNames), Buffer.alloc(0), { ...index, tags: [] })));
    const written = Promise.all(writes).then(() => {}, () => {});
    this.nodeWrites.set(o.key, written);
    void written.then(() => { if (this.nodeWrites.get(o.key) === written) this.nodeWrites.delete(o.key); });
  }

  /** Resolves once the object last stored under key is in the node tier (or failed to get there): another worker can read it. */
  written(key: string): Promise<void> {
    return this.nodeWrites.get(key) ?? Promise.resolve();
  }

  /**
   * Applies the purge that began `generation` to the node tier (tracked: settled() waits for it; a failure is
   * counted in nodePurgeFailures). Fills of that generation began after this worker applied the purge, so once
   * the node tier has it they carry the node's generation after it (until then, the node refuses them).
   */
  private purgeNode(endpointId: string, target: PurgeTarget, generation: number, soft = false): void {
    const node = this.node;
    if (node === null) return;
    this.track(node.purge(endpointId, target, soft).then(
      () => {
        const start = this.generationStarts.get(generation);
        if (start !== undefined) start.node = Math.max(start.node, node.generation());
      },
      (err: unknown) => { this.nodePurgeFailures++; throw err; },
    ));
  }

  /** Stores the object; false when a purge issued while it was being fetched covers it. */
  set(o: CachedObject): boolean {
    if (this.isBanned(o)) return false;
    if (o.fromNodeTier === true) o.fromNodeTier = false; // stored by this worker now (a 304's update of one it read)
    const old = this.memory.peek(o.key);
    if (old) this.delete(old, false);
    if (o.varyNames) this.varyByPrimary.set(o.primaryKey, o.varyNames);
    else if (this.varyByPrimary.has(o.primaryKey)) this.varyByPrimary.delete(o.primaryKey);
    this.toNode(o);
    this.memory.set(o.key, o);
    if (!this.memory.has(o.key)) return this.node !== null && o.size <= this.node.maxBytes; // too large for the memory tier
    const memory = this.counts.memory;
    memory.fills++;
    memory.fillBytes += o.body?.length ?? 0;
    this.index(o);
    return true;
  }

  /** Removes the object from this worker's memory and (unless it is being replaced) from the node tier. */
  delete(o: CachedObject, fromNode = true): void {
    if (this.memory.peek(o.key) === o) this.memory.delete(o.key);
    if (fromNode && this.node !== null) this.track(this.node.delete(o.key));
    this.unindex(o);
  }

  private unindex(o: CachedObject): void {
    // Only drop index entries if this object is no longer stored under its key.
    if (this.memory.peek(o.key) !== undefined) return;
    removeFromIndex(this.pathIndex, o.endpointId, o.path, o.key);
    for (const tag of o.tags) removeFromIndex(this.tagIndex, o.endpointId, tag, o.key);
  }

  private deleteKey(key: string): number {
    const o = this.memory.peek(key);
    if (!o) return 0;
    this.delete(o, false);
    return 1;
  }

  /**
   * A soft purge (Fastly's): every object of the endpoint the target names, fetched before now, is marked stale
   * instead of removed: its next use revalidates it with the origin (a conditional request), and it may be served
   * stale meanwhile as its stale-while-revalidate and stale-if-error allow. O(1) here, like a ban: objects are
   * marked when next looked up or stored, and by the lurker; the node tier marks its entries itself. Returns how
   * many stored objects a path or tag target names (0 for the others).
   */
  softPurge(endpointId: string, target: PurgeTarget): number {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    state.soft.push({ generation, target, atMs: this.now(), swept: false });
    state.latestSoftGeneration = generation;
    this.scheduleLurker();
    this.purgeNode(endpointId, target, generation, true);
    if (target.kind === 'path') return this.pathIndex.get(endpointId)?.get(target.path)?.size ?? 0;
    if (target.kind === 'tag') return this.tagIndex.get(endpointId)?.get(target.tag)?.size ?? 0;
    return 0;
  }

  /**
   * Removes every object stored for the exact path (all query variants and Vary variants), and records the
   * path's purge generation: an object of the path from a fetch that began before it is not stored.
   */
  purgePath(endpointId: string, path: string): number {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    state.paths.delete(path); // kept in purge order, oldest first, for the lurker's expiry
    state.paths.set(path, { generation, atMs: this.now(), swept: true });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
    this.purgeNode(endpointId, { kind: 'path', path }, generation);
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
    state.tags.set(tag, { generation, atMs: this.now(), swept: false });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
    this.purgeNode(endpointId, { kind: 'tag', tag }, generation);
    return this.tagIndex.get(endpointId)?.get(tag)?.size ?? 0;
  }

  /** O(1): bans everything the endpoint holds now; a lurker reclaims the memory. */
  purgeAll(endpointId: string): void {
    this.addBan(endpointId, null);
    this.purgeNode(endpointId, { kind: 'all' }, this.generationCounter);
  }

  /** O(1): bans paths matching the glob; a lurker reclaims the memory. */
  purgeWildcard(endpointId: string, pattern: string): void {
    this.addBan(endpointId, compilePathGlob(pattern));
    this.purgeNode(endpointId, { kind: 'glob', pattern }, this.generationCounter);
  }

  /** Drops every object of every endpoint, in memory and in the node tier (missed purges that cannot be replayed). */
  dropEverything(): void {
    for (const endpointId of this.endpointIds()) this.addBan(endpointId, null);
    if (this.node !== null) this.track(this.node.clear());
  }

  endpointIds(): string[] {
    return [...new Set([...this.pathIndex.keys(), ...this.purgeState.keys()])];
  }

  private purgeStateFor(endpointId: string): EndpointPurgeState {
    let state = this.purgeState.get(endpointId);
    if (!state) {
      state = { bans: [], soft: [], latestSoftGeneration: 0, tags: new Map(), paths: new Map(), latestBanGeneration: 0 };
      this.purgeState.set(endpointId, state);
    }
    return state;
  }

  private addBan(endpointId: string, matcher: PathMatcher | null): void {
    const generation = this.nextGeneration();
    const state = this.purgeStateFor(endpointId);
    if (matcher === null) {
      // An "all" ban supersedes every older ban, tag purge, path purge and soft purge.
      state.bans = [];
      state.soft = [];
      state.tags.clear();
      state.paths.clear();
    }
    state.bans.push({ generation, matcher, atMs: this.now(), swept: false });
    state.latestBanGeneration = generation;
    this.scheduleLurker();
  }

  private isBanned(o: CachedObject): boolean {
    const state = this.purgeState.get(o.endpointId);
    if (state && state.latestBanGeneration > o.generation && coveredBy(o, state.bans, state.tags, state.paths)) return true;
    if (state && state.latestSoftGeneration > o.generation) {
      for (const s of state.soft) if (s.generation > o.generation && targets(s.target, o.path, o.tags)) staleFrom(o, s.atMs);
    }
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
    const now = this.now();
    for (const [endpointId, state] of this.purgeState) {
      // Tag purges: walk only the objects carrying the tag.
      for (const [tag, purge] of state.tags) {
        if (purge.swept) continue;
        const keys = this.tagIndex.get(endpointId)?.get(tag);
        for (const key of keys ? [...keys] : []) {
          const o = this.memory.peek(key);
          if (o && o.generation < purge.generation) this.delete(o, false);
          if (++done % SLICE === 0) yield;
        }
        purge.swept = true;
      }
      for (const [tag, purge] of state.tags) if (purge.swept && now - purge.atMs > PURGE_RECORD_GRACE_MS) state.tags.delete(tag);
      // Soft purges: mark what they name (the objects stay); their records expire oldest first.
      for (const s of state.soft) {
        if (s.swept) continue;
        const named = s.target.kind === 'tag' ? this.tagIndex.get(endpointId)?.get(s.target.tag)
          : s.target.kind === 'path' ? this.pathIndex.get(endpointId)?.get(s.target.path) : allKeys(this.pathIndex.get(endpointId));
        for (const key of named === undefined ? [] : [...named]) {
          const o = this.memory.peek(key);
          if (o && o.generation < s.generation && targets(s.target, o.path, o.tags)) staleFrom(o, s.atMs);
          if (++done % SLICE === 0) yield;
        }
        s.swept = true;
      }
      while (state.soft.length > 0 && state.soft[0].swept && now - state.soft[0].atMs > PURGE_RECORD_GRACE_MS) state.soft.shift();
      // Path purges deleted their objects at once; their records expire oldest first.
      for (const [path, purge] of state.paths) {
        if (now - purge.atMs <= PURGE_RECORD_GRACE_MS) break;
        state.paths.delete(path);
      }
      state.bans = state.bans.filter((b) => !b.swept || now - b.atMs < PURGE_RECORD_GRACE_MS);
      const bans = state.bans.filter((b) => !b.swept);
      if (bans.length === 0) continue;
      const newest = bans[bans.length - 1].generation;
      for (const key of allKeys(this.pathIndex.get(endpointId))) {
        const o = this.memory.peek(key);
        if (o && o.generation < newest && coveredBy(o, bans, null, null)) this.delete(o, false);
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
    this.memory.clear();
    if (this.node !== null) this.track(this.node.clear());
    this.pathIndex.clear();
    this.tagIndex.clear();
    this.varyByPrimary.clear();
    this.purgeState.clear();
  }
}

/**
 * Marks the object stale from atMs (a soft purge then): its lifetime ends at the age it had then, so it is
 * revalidated before its next use, and its stale-while-revalidate and stale-if-error windows count from then.
 */
function staleFrom(o: CachedObject, atMs: number): void {
  const ageThen = o.correctedInitialAgeMs + (atMs - o.responseTimeMs);
  if (o.lifetimeMs <= ageThen) return;
  o.lifetimeMs = Math.max(0, ageThen);
  o.hitHeaders = null;
  o.shapedHit = null;
}

function allKeys(paths: Map<string, Set<string>> | undefined): string[] {
  const keys: string[] = [];
  if (paths !== undefined) for (const set of paths.values()) keys.push(...set);
  return keys;
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
