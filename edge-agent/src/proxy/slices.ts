// Large objects in slices (the layout is cache/slices.ts's): a range miss asks
// the origin for the aligned slice that holds the range's first byte, not for
// the viewer's range nor for the whole object, and its 206 makes the object's
// head (headers, validators, freshness, total length) and its first kept
// slice. A full request of a large object reads the origin's whole answer as
// consecutive slices, kept as they pass (storing.ts hands the body over). Any
// viewer range, and the full object, is then answered slice after slice: the
// first slice is had before the head goes out (so its failure can still be
// answered), the next one is fetched while this one is written, and each
// missing slice is fetched once per node (collapsed here, and under the
// node's fill lock across workers). Every slice must come with the head's
// validators; one that does not means the origin has another version now:
// the head and every slice of the old one are dropped (a viewer halfway
// through the old version is cut off), and the new version starts from the
// answer in hand. A stale head is revalidated by a conditional request for
// the slice the viewer needs (304: fresh again, slices kept). An origin that
// ignores Range gets the whole-object fill (or pass-through above the object
// limit), as without slices.
import { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { CacheStatus } from '../metrics/traffic.ts';
import {
  fillOnce, parseContentRange, rangeStart, sliceBounds, sliceCount, sliceKey, type CachedObject, type CacheStore, type FillTurns,
  type NodeFillLock, type SliceSource,
} from '../cache/index.ts';
import type { RoutedExchange } from './exchange.ts';
import { dispose, type Exit } from './exit.ts';
import { originErrorBody, type Forwarder } from './forward.ts';
import { headerString, parseRange } from './http-util.ts';
import { cacheKeys } from './lookup.ts';
import { classifyOriginError, OriginError, type OriginResponse } from './origin-client.ts';
import { ageSeconds, answerNotModified, buildHeaders, ifRangeAllows, serveFromCache } from './serve-cached.ts';
import { ownRequest, sameVersion, slicedHead, updateFrom304, withoutViewerCredentials, type CacheFiller, type SliceSettings } from './storing.ts';

/** What asking for one slice of a head ended with. */
type Slice =
  | { type: 'slice'; body: Buffer; fetched: boolean }
  /** The origin has another version: its head (with the slice asked for kept) when it may be kept, else null. */
  | { type: 'changed'; head: CachedObject | null }
  /** The origin answered with the whole object: it ignores Range (now). */
  | { type: 'whole'; response: OriginResponse }
  /** Any other answer (404, 416, 5xx...), for the viewer as it came. */
  | { type: 'refused'; response: OriginResponse }
  | { type: 'error'; error: OriginError };

/** What the first request for a slice of an object nothing is known of found out. */
type Discovery =
  | { type: 'head'; head: CachedObject }
  | { type: 'entry'; entry: CachedObject }
  /** The origin's answer is the viewer's too (a whole 200, a 404, a 416...): for the request that asked only. */
  | { type: 'answer'; response: OriginResponse; body: Readable }
  /** Not kept in slices (no validator, not storable): the viewer's own request goes to the origin. */
  | { type: 'forward' }
  | { type: 'error'; error: OriginError };

export interface SlicerDeps {
  store: CacheStore;
  forwarder: Forwarder;
  filler: CacheFiller;
  exit: Exit;
  fillLock: NodeFillLock | null;
  /** How new objects are sliced (existing heads keep the slice size they were made with). */
  settings: SliceSettings;
  logger: Logger;
  /** The fill lock's answers, counted (shared with the request path's whole-object fills). */
  fillTurns: FillTurns;
  /** Whether the stale object may answer instead of the origin's failure (the request path's rule). */
  staleOnError: (stale: CachedObject, error: OriginError | null) => boolean;
}

export class Slicer {
  private readonly deps: SlicerDeps;
  /** Slice fetches (and source reads) under way, by slice key. */
  private readonly slices = new Map<string, Promise<Slice>>();
  /**
   * First requests for objects nothing is known of, by primary key: a seek into another slice meanwhile waits for
   * the head this one makes (and then asks for its own slice) rather than making a second head, whose version
   * would replace the first one's and lose the slices kept under it.
   */
  private readonly discoveries = new Map<string, Promise<Discovery>>();
  /** Revalidations of stale heads under way, by head key: the head they end with, or null. */
  private readonly revalidations = new Map<string, Promise<CachedObject | null>>();
  /** Slices fetched from the origin (or read from a whole answer), since start. */
  fills = 0;
  /** Requests that waited for another one's slice request instead of asking the origin, since start. */
  joined = 0;

  constructor(deps: SlicerDeps) {
    this.deps = deps;
  }

  /** Whether a range miss with this Range field is asked for slice-wise (one byte range: first byte or suffix). */
  handles(range: string): boolean {
    return this.deps.settings.sliceBytes > 0 && rangeStart(range) !== undefined;
  }

  /**
   * Answers the exchange from an object kept in slices: 304 to a matching conditional, 416 to a range beyond it,
   * the head alone to HEAD, else the range (206) or the whole object (200) slice after slice. source: the
   * origin's whole body to read slices from as it comes (the request that filled the head).
   */
  async serve(ex: RoutedExchange, head: CachedObject, status: CacheStatus, source: SliceSource | null = null): Promise<void> {
    const exit = this.deps.exit;
    const { total, sliceBytes } = head.sliced!;
    const ageSec = ageSeconds(head, this.deps.store.now());
    if (answerNotModified(exit, ex, head, status, ageSec)) return source?.dispose();
    let first = 0;
    let last = total - 1;
    let partial = false;
    const range = ex.vh.range;
    if (range !== undefined && ifRangeAllows(ex.vh, head)) {
      const r = parseRange(range, total);
      if (r === null) {
        source?.dispose();
        const out = buildHeaders(exit, head, ageSec, status, true);
        out.push('content-range', `bytes */${total}`, 'content-length', '0');
        return void exit.send(ex, 416, out, null, status, true, head);
      }
      if (r !== undefined) [first, last, partial] = [r[0], r[1], true];
    }
    if (ex.method === 'HEAD') {
      source?.dispose();
      return void exit.send(ex, partial ? 206 : 200, this.head(head, ageSec, status, partial, first, last), null, status, true, head);
    }
    const n0 = Math.floor(first / sliceBytes);
    const n1 = Math.floor(last / sliceBytes);
    const opening = await this.slice(ex, head, n0, source);
    if (opening.type !== 'slice') {
      source?.dispose();
      return this.instead(ex, head, opening, status);
    }
    // The answer's status is its first slice's: a hit when it was kept, a miss when it had to be fetched.
    const shown: CacheStatus = opening.fetched && (status === 'HIT' || status === 'UPDATING') ? 'MISS' : status;
    const cut = (body: Buffer, n: number) => body.subarray(Math.max(0, first - n * sliceBytes), Math.min(body.length, last - n * sliceBytes + 1));
    const pieces = async function* (this: Slicer) {
      try {
        let next = n0 < n1 ? this.slice(ex, head, n0 + 1, source) : null;
        yield cut(opening.body, n0);
        for (let n = n0 + 1; n <= n1; n++) {
          const s = await next!;
          next = n < n1 ? this.slice(ex, head, n + 1, source) : null;
          if (s.type !== 'slice') {
            if (s.type === 'whole' || s.type === 'refused') dispose(s.response.body);
            throw new Error(`slice ${n} of ${ex.path}: ${s.type}`);
          }
          yield cut(s.body, n);
        }
      } finally {
        source?.dispose();
      }
    };
    await exit.send(ex, partial ? 206 : 200, this.head(head, ageSec, shown, partial, first, last), Readable.from(pieces.call(this)), shown, !opening.fetched, head);
  }

  /** A range miss of an object nothing is known of: its first slice is asked for, once per node. */
  async rangeMiss(ex: RoutedExchange, primary: string): Promise<void> {
    const start = rangeStart(ex.vh.range!);
    const n = start == null ? 0 : Math.floor(start / this.deps.settings.sliceBytes);
    const key = `${primary}\x02?`;
    const running = this.discoveries.get(key);
    if (running !== undefined) this.joined++;
    const d = running !== undefined ? await running : await this.track(this.discoveries, key, this.discoverLocked(ex, primary, n, key));
    const exit = this.deps.exit;
    switch (d.type) {
      case 'head': return this.serve(ex, d.head, 'MISS');
      case 'entry': return serveFromCache(exit, ex, d.entry, 'MISS', this.deps.store.now());
      case 'error': return exit.refuse(ex, d.error.status, originErrorBody(d.error), 'MISS');
      case 'answer':
        // Only the request that asked may be answered with the origin's body; one that joined asks itself.
        if (running === undefined) return void await this.deps.forwarder.stream(ex, d.response, d.body, 'MISS');
        return this.deps.forwarder.forward(ex, 'MISS', false);
      case 'forward': return this.deps.forwarder.forward(ex, 'MISS', false);
    }
  }

  /** A stale head: revalidated by a conditional request for the slice the viewer needs first, once per node. */
  async revalidate(ex: RoutedExchange, stale: CachedObject): Promise<void> {
    const running = this.revalidations.get(stale.key);
    if (running !== undefined) {
      this.joined++;
      const head = await running;
      return head !== null ? this.serve(ex, head, 'REVALIDATED') : this.deps.forwarder.forward(ex, 'EXPIRED', false);
    }
    const work = this.revalidation(ex, stale);
    void this.track(this.revalidations, stale.key, work.then((r) => (r.type === 'head' ? r.head : null)));
    const r = await work;
    if (r.type === 'head') return this.serve(ex, r.head, r.head === stale ? 'STALE' : 'REVALIDATED');
    return this.instead(ex, stale, r.failure, 'EXPIRED');
  }

  /** stale-while-revalidate: the head is revalidated in the background (nobody waits). */
  refresh(ex: RoutedExchange, stale: CachedObject): void {
    if (this.revalidations.has(stale.key)) return;
    void this.track(this.revalidations, stale.key, this.revalidation(ex, stale).then((r) => {
      if (r.type === 'head') return r.head;
      const f = r.failure;
      if (f.type === 'whole' || f.type === 'refused') dispose(f.response.body);
      return null;
    }));
  }

  /** Slice n of the head: kept, being fetched, read from the source, or fetched now. Never rejects. */
  private slice(ex: RoutedExchange, head: CachedObject, n: number, source: SliceSource | null): Promise<Slice> {
    const key = sliceKey(head.key, head.sliced!.version, n);
    // The whole body in hand is read on (even past a slice kept meanwhile), so it never stalls.
    if (source !== null && source.at(n)) return this.track(this.slices, key, this.fromSource(head, n, source));
    const held = this.deps.store.getPart(key);
    if (held !== undefined && held.body !== null) return Promise.resolve({ type: 'slice', body: held.body, fetched: false });
    const running = this.slices.get(key);
    if (running === undefined) return this.track(this.slices, key, this.fetchLocked(ex, head, n, key));
    this.joined++;
    return running;
  }

  private async fromSource(head: CachedObject, n: number, source: SliceSource): Promise<Slice> {
    const generation = this.deps.store.currentGeneration;
    try {
      const body = await source.read(n);
      this.fills++;
      this.keep(head, n, body, generation);
      return { type: 'slice', body, fetched: true };
    } catch (err) {
      return { type: 'error', error: asOriginError(err) };
    }
  }

  /** A missing slice, fetched by one worker of the node; the others read what it kept. */
  private fetchLocked(ex: RoutedExchange, head: CachedObject, n: number, key: string): Promise<Slice> {
    const store = this.deps.store;
    return fillOnce<Slice>(this.deps.fillLock, key, () => this.fetch(ex, head, n), () => {
      const held = store.getPart(key);
      return held !== undefined && held.body !== null ? { type: 'slice', body: held.body, fetched: false } : undefined;
    }, () => store.written(key), this.deps.fillTurns);
  }

  private async fetch(ex: RoutedExchange, head: CachedObject, n: number): Promise<Slice> {
    const { sliceBytes, total } = head.sliced!;
    const generation = this.deps.store.currentGeneration;
    const [first, last] = sliceBounds(n, sliceBytes, total);
    let res: OriginResponse;
    try {
      res = await this.request(ex, first, last, null);
    } catch (err) {
      return { type: 'error', error: asOriginError(err) };
    }
    return this.answer(ex, head, n, res, generation);
  }

  /** The origin's answer to a request for slice n of the head. */
  private async answer(ex: RoutedExchange, head: CachedObject, n: number, res: OriginResponse, generation: number): Promise<Slice> {
    if (res.statusCode === 200) return { type: 'whole', response: res };
    if (res.statusCode !== 206) return { type: 'refused', response: res };
    const { sliceBytes, total } = head.sliced!;
    const cr = parseContentRange(headerString(res.headers['content-range']));
    const [first, last] = sliceBounds(n, sliceBytes, total);
    try {
      if (cr !== null && cr.total === total && cr.first === first && cr.last === last && sameVersion(head, res)) {
        const body = await readExactly(res, last - first + 1);
        this.fills++;
        this.keep(head, n, body, generation);
        return { type: 'slice', body, fetched: true };
      }
      // Another version (other validators, or another length): the old one's head and slices go.
      this.drop(head);
      const fresh = cr === null ? null : this.newHead(ex, head.primaryKey, res, cr.total, generation, sliceBytes);
      if (fresh === null || cr!.first !== first || cr!.last !== sliceBounds(n, sliceBytes, cr!.total)[1]) {
        dispose(res.body);
        return { type: 'changed', head: null };
      }
      const body = await readExactly(res, cr!.last - cr!.first + 1);
      this.fills++;
      this.deps.store.set(fresh);
      this.keep(fresh, n, body, generation);
      return { type: 'changed', head: fresh };
    } catch (err) {
      return { type: 'error', error: asOriginError(err) };
    }
  }

  /**
   * The first request for slice n of an object nothing is known of (no head): one worker of the node asks; the
   * others then look for the head (or the whole object) it kept.
   */
  private discoverLocked(ex: RoutedExchange, primary: string, n: number, key: string): Promise<Discovery> {
    const store = this.deps.store;
    return fillOnce<Discovery>(this.deps.fillLock, key, () => this.discover(ex, primary, n), () => {
      const found = store.get(cacheKeys(ex, store).key);
      if (found === undefined) return undefined;
      return found.sliced !== undefined ? { type: 'head', head: found } : { type: 'entry', entry: found };
    }, async (d) => {
      if (d.type === 'head') await store.written(d.head.key);
      else if (d.type === 'entry') await store.written(d.entry.key);
    }, this.deps.fillTurns);
  }

  private async discover(ex: RoutedExchange, primary: string, n: number): Promise<Discovery> {
    const store = this.deps.store;
    const sliceBytes = this.deps.settings.sliceBytes;
    const generation = store.currentGeneration;
    const first = n * sliceBytes;
    let res: OriginResponse;
    try {
      res = await this.request(ex, first, first + sliceBytes - 1, null);
    } catch (err) {
      return { type: 'error', error: asOriginError(err) };
    }
    if (res.statusCode === 200) return this.whole(ex, primary, res, generation);
    // 416 (the range starts past the end), 404, 5xx...: what the viewer's own request would have got.
    if (res.statusCode !== 206) return { type: 'answer', response: res, body: res.body };
    const cr = parseContentRange(headerString(res.headers['content-range']));
    if (cr === null || cr.first !== first || cr.last !== sliceBounds(n, sliceBytes, cr.total)[1]) {
      dispose(res.body);
      return { type: 'forward' };
    }
    if (cr.first === 0 && cr.last === cr.total - 1) {
      // The slice is the whole object: kept as one, as a full request would have kept it.
      const headers: OriginResponse['headers'] = { ...res.headers, 'content-length': String(cr.total) };
      delete headers['content-range'];
      return this.whole(ex, primary, { ...res, statusCode: 200, headers }, generation);
    }
    // A head made meanwhile for the same version (a full request of the object, read slice by slice) is kept:
    // a second head would replace it, and the slices kept under its version would be lost.
    const known = store.get(cacheKeys(ex, store).key);
    const same = known?.sliced !== undefined && known.sliced.total === cr.total && known.sliced.sliceBytes === sliceBytes && sameVersion(known, res) ? known : null;
    const head = same ?? this.newHead(ex, primary, res, cr.total, generation);
    if (head === null) {
      dispose(res.body);
      return { type: 'forward' };
    }
    try {
      const body = await readExactly(res, cr.last - cr.first + 1);
      this.fills++;
      if (same === null && !store.set(head)) return { type: 'forward' };
      this.keep(head, n, body, generation);
      return { type: 'head', head };
    } catch (err) {
      return { type: 'error', error: asOriginError(err) };
    }
  }

  /** A whole answer to a slice request: kept whole if it may be and fits, else the viewer's answer as it is. */
  private async whole(ex: RoutedExchange, primary: string, res: OriginResponse, generation: number): Promise<Discovery> {
    const result = await this.deps.filler.keepWhole(ex, primary, res, generation);
    if (result.type === 'stored') return { type: 'entry', entry: result.entry };
    if (result.type === 'passthrough') return { type: 'answer', response: result.response, body: result.body };
    if (result.type === 'error') return { type: 'error', error: result.error };
    result.source?.dispose();
    return { type: 'forward' };
  }

  /** A conditional request for the slice the viewer needs first: the head it leaves (fresh again, or a new version's), or why not. */
  private async revalidation(ex: RoutedExchange, stale: CachedObject): Promise<{ type: 'head'; head: CachedObject } | { type: 'failed'; failure: Exclude<Slice, { type: 'slice' }> }> {
    const { sliceBytes, total } = stale.sliced!;
    const start = ex.vh.range === undefined ? 0 : rangeStart(ex.vh.range);
    const n = start == null ? 0 : Math.min(Math.floor(start / sliceBytes), sliceCount(total, sliceBytes) - 1);
    const store = this.deps.store;
    const generation = store.currentGeneration;
    const [first, last] = sliceBounds(n, sliceBytes, total);
    let res: OriginResponse;
    try {
      res = await this.request(ex, first, last, stale);
    } catch (err) {
      const error = asOriginError(err);
      if (this.deps.staleOnError(stale, error)) return { type: 'head', head: stale };
      return { type: 'failed', failure: { type: 'error', error } };
    }
    if (res.statusCode === 304) {
      await res.body.dump().catch(() => {});
      const updated = updateFrom304(stale, res, ex.rule, generation);
      store.set(updated);
      return { type: 'head', head: updated };
    }
    if (res.statusCode >= 500 && this.deps.staleOnError(stale, null)) {
      dispose(res.body);
      return { type: 'head', head: stale };
    }
    const s = await this.answer(ex, stale, n, res, generation);
    if (s.type === 'slice') {
      // The same version, sent whole (the origin does not answer conditionals): fresh again from this answer's fields.
      const renewed = this.newHead(ex, stale.primaryKey, res, total, generation, sliceBytes);
      if (renewed === null) return { type: 'head', head: stale };
      renewed.sliced = stale.sliced;
      store.set(renewed);
      return { type: 'head', head: renewed };
    }
    if (s.type === 'changed' && s.head !== null) return { type: 'head', head: s.head };
    return { type: 'failed', failure: s };
  }

  /** When the first slice could not be had: the answer instead. */
  private async instead(ex: RoutedExchange, head: CachedObject, s: Exclude<Slice, { type: 'slice' }>, status: CacheStatus): Promise<void> {
    const exit = this.deps.exit;
    const shown: CacheStatus = status === 'EXPIRED' ? 'EXPIRED' : 'MISS';
    switch (s.type) {
      case 'changed':
        if (s.head !== null) return this.serve(ex, s.head, shown);
        return this.deps.forwarder.forward(ex, shown, false);
      case 'whole': {
        // The origin ignores Range now: the object is no longer kept in slices.
        this.drop(head);
        const d = await this.whole(ex, head.primaryKey, s.response, this.deps.store.currentGeneration);
        if (d.type === 'entry') return serveFromCache(exit, ex, d.entry, shown, this.deps.store.now());
        if (d.type === 'answer') return void await this.deps.forwarder.stream(ex, d.response, d.body, shown);
        if (d.type === 'error') return exit.refuse(ex, d.error.status, originErrorBody(d.error), shown);
        return this.deps.forwarder.forward(ex, shown, false);
      }
      case 'refused':
        // Gone at the origin (404, 410): so is the head.
        if (s.response.statusCode === 404 || s.response.statusCode === 410) this.drop(head);
        return void await this.deps.forwarder.stream(ex, s.response, s.response.body, shown);
      case 'error':
        this.deps.forwarder.logFailure(ex, s.error);
        return exit.refuse(ex, s.error.status, originErrorBody(s.error), shown);
    }
  }

  /** A new head from an answer to a slice request; sliceBytes: the slice size the request was cut by (default the setting). */
  private newHead(ex: RoutedExchange, primary: string, res: OriginResponse, total: number, generation: number, sliceBytes = this.deps.settings.sliceBytes): CachedObject | null {
    return slicedHead(ex, primary, res, total, sliceBytes, generation, withoutViewerCredentials(ex));
  }

  /** The head of an answer from slices: the object's, with the range it holds. */
  private head(head: CachedObject, ageSec: number, status: CacheStatus, partial: boolean, first: number, last: number): string[] {
    const fromNode = head.fromNodeTier === true;
    if (fromNode) head.fromNodeTier = false;
    const out = buildHeaders(this.deps.exit, head, ageSec, status, partial, fromNode);
    if (partial) out.push('content-range', `bytes ${first}-${last}/${head.sliced!.total}`, 'content-length', String(last - first + 1));
    return out;
  }

  /** Keeps slice n of the head (indexed like the head: its endpoint, path and tags, so purges take it too). */
  private keep(head: CachedObject, n: number, body: Buffer, generation: number): void {
    const key = sliceKey(head.key, head.sliced!.version, n);
    this.deps.store.setPart({
      key, primaryKey: key, endpointId: head.endpointId, path: head.path, tags: head.tags, status: 206, headers: [], body, size: body.length,
      requestTimeMs: head.requestTimeMs, responseTimeMs: head.responseTimeMs, correctedInitialAgeMs: 0, lifetimeMs: head.lifetimeMs,
      mustRevalidate: head.mustRevalidate, noCache: false, staleWhileRevalidateMs: 0, staleIfErrorMs: 0, etag: head.etag, lastModified: head.lastModified,
      varyNames: null, varyValues: '', authorizationAllowed: head.authorizationAllowed, generation, checkedGeneration: generation,
      cacheRuleId: head.cacheRuleId, browserCacheControl: null, statusHeader: head.statusHeader, hitHeaders: null, hitHeadersAge: -1, urlSlot: null,
    });
  }

  /** Drops the head and every slice of its version. */
  private drop(head: CachedObject): void {
    const { version, total, sliceBytes } = head.sliced!;
    this.deps.store.delete(head);
    for (let n = 0, count = sliceCount(total, sliceBytes); n < count; n++) this.deps.store.deletePart(sliceKey(head.key, version, n));
  }

  /** A GET for bytes first..last, conditional on the stale head's validators when given. */
  private request(ex: RoutedExchange, first: number, last: number, conditional: CachedObject | null): Promise<OriginResponse> {
    // The edge's own request (its slices serve every viewer): no viewer conditionals or credentials but keyed cookies.
    const headers = this.deps.forwarder.originHeaders(ex, true);
    ownRequest(ex, headers);
    headers.range = `bytes=${first}-${last}`;
    if (conditional !== null) {
      if (conditional.etag !== undefined) headers['if-none-match'] = conditional.etag;
      if (conditional.lastModified !== undefined) headers['if-modified-since'] = conditional.lastModified;
    }
    return this.deps.forwarder.fetch(ex, { method: 'GET', headers });
  }

  private track<T>(map: Map<string, Promise<T>>, key: string, work: Promise<T>): Promise<T> {
    map.set(key, work);
    void work.finally(() => { if (map.get(key) === work) map.delete(key); }).catch(() => {});
    return work;
  }
}

/** A slice's body, which must be exactly `want` bytes. */
async function readExactly(res: OriginResponse, want: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let got = 0;
  for await (const chunk of res.body) {
    chunks.push(chunk as Buffer);
    got += (chunk as Buffer).length;
    if (got > want) {
      dispose(res.body);
      throw new OriginError('protocol', `the origin sent more than the ${want} bytes of its Content-Range`);
    }
  }
  if (got < want) throw new OriginError('protocol', `the origin sent ${got} of the ${want} bytes of its Content-Range`);
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, got);
}

function asOriginError(err: unknown): OriginError {
  if (err instanceof OriginError) return err;
  const e = classifyOriginError(err);
  return e instanceof OriginError ? e : new OriginError('protocol', e.message);
}
