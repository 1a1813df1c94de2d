// Encoded variants of stored objects (policy/compression.ts says what is
// compressed and how). The identity object is what the cache fill stores; the
// first request that accepts br or gzip for a compressible object has that
// variant made (once: concurrent requests wait for the same compression, off
// the event loop) and stored beside it as an object of its own, so a hit is
// never compressed again:
// - its key is the identity object's key, the coding and the identity body's
//   number (a body refreshed from the origin gets new variants; a 304 keeps the
//   body and the variant, whose freshness is then copied again);
// - it carries the identity object's path, tags and fetch generation, so path,
//   tag, wildcard and "all" purges drop every variant with the object;
// - it counts against the memory budget like any object and is evicted like
//   one (a variant evicted or spilled to disk is simply made again).
// Byte ranges are always answered from the identity object.
import type { Logger } from 'pino';
import { compressBuffer, compressible, encodedEtag, encodedHead, type Coding, type CompressionSettings } from '../policy/compression.ts';
import { SingleFlight, type CachedObject, type CacheStore } from '../cache/index.ts';

const bodyNumbers = new WeakMap<Buffer, number>();
let nextBodyNumber = 1;

/** A number per body Buffer (the same Buffer is shared by an object and its 304-refreshed copies). */
function bodyNumber(body: Buffer): number {
  let n = bodyNumbers.get(body);
  if (n === undefined) bodyNumbers.set(body, (n = nextBodyNumber++));
  return n;
}

/** Bound of the set of (object, coding) pairs found not worth encoding (the encoded body was not smaller). */
const NOT_SMALLER_LIMIT = 10_000;

export class CompressedVariants {
  private readonly store: CacheStore;
  private readonly logger: Logger;
  private readonly making = new SingleFlight<CachedObject>();
  private readonly notSmaller = new Set<string>();
  /** Per identity object: whether the settings in force let it be compressed, and its variants' keys (made once, not per hit). */
  private readonly eligible = new WeakMap<CachedObject, { settings: CompressionSettings; ok: boolean; keys: Partial<Record<Coding, string>> }>();

  constructor(store: CacheStore, logger: Logger) {
    this.store = store;
    this.logger = logger;
  }

  /**
   * The object to answer with: the identity object, its stored variant for the
   * coding Accept-Encoding prefers, or (the first time) a promise of that
   * variant, resolving to the identity object if encoding fails or saves nothing.
   */
  choose(entry: CachedObject, settings: CompressionSettings, acceptEncoding: string | undefined, range: boolean): CachedObject | Promise<CachedObject> {
    const body = entry.body;
    if (range || entry.status !== 200 || body === null || entry.coding !== undefined) return entry;
    const coding = settings.negotiate(acceptEncoding);
    if (coding === null) return entry;
    const known = this.eligibility(entry, settings);
    if (!known.ok) return entry;
    const key = (known.keys[coding] ??= `${entry.key}\x02${coding}\x02${bodyNumber(body)}`);
    const found = this.store.get(key);
    if (found !== undefined) {
      if (found.responseTimeMs === entry.responseTimeMs && found.generation === entry.generation) return found;
      // The identity object was revalidated (304): same body, new freshness and fields.
      const refreshed = variantOf(entry, coding, found.body!, key);
      this.store.set(refreshed);
      return refreshed;
    }
    if (this.notSmaller.has(key)) return entry;
    return this.making.run(key, () => this.make(entry, coding, key));
  }

  private eligibility(entry: CachedObject, settings: CompressionSettings): { ok: boolean; keys: Partial<Record<Coding, string>> } {
    const known = this.eligible.get(entry);
    if (known !== undefined && known.settings === settings) return known;
    const field = (name: string) => {
      let v: string | undefined;
      for (const [k, x] of entry.headers) if (k === name) v = v === undefined ? x : `${v}, ${x}`;
      return v;
    };
    const made = { settings, ok: compressible(entry.status, field, entry.body!.length, settings), keys: {} };
    this.eligible.set(entry, made);
    return made;
  }

  private async make(entry: CachedObject, coding: Coding, key: string): Promise<CachedObject> {
    const identity = entry.body!;
    let encoded: Buffer;
    try {
      encoded = await compressBuffer(coding, identity);
    } catch (err) {
      this.logger.warn({ endpoint: entry.endpointId, path: entry.path, coding, err: (err as Error).message }, 'compression failed; answering uncompressed');
      return entry;
    }
    if (encoded.length >= identity.length) {
      if (this.notSmaller.size >= NOT_SMALLER_LIMIT) this.notSmaller.clear();
      this.notSmaller.add(key);
      return entry;
    }
    const variant = variantOf(entry, coding, encoded, key);
    // Stored only beside its identity object (an object served but not kept, e.g. for a no-store request, keeps no variant).
    if (this.store.memory.peek(entry.key)?.body === identity) this.store.set(variant);
    return variant;
  }
}

/** The variant object: the identity object's freshness, path, tags and generation; its own key, body, fields and ETag. */
function variantOf(entry: CachedObject, coding: Coding, body: Buffer, key: string): CachedObject {
  const flat: string[] = [];
  for (const [k, v] of entry.headers) flat.push(k, v);
  const head = encodedHead(flat, coding, body.length);
  const headers: [string, string][] = [];
  let headerBytes = 0;
  for (let i = 0; i < head.length; i += 2) {
    headers.push([head[i], head[i + 1]]);
    headerBytes += head[i].length + head[i + 1].length;
  }
  return {
    ...entry, key, headers, body, size: body.length + headerBytes, etag: encodedEtag(entry.etag, coding), coding,
    hitHeaders: null, hitHeadersAge: -1, urlSlot: null, shapedHit: null,
  };
}
