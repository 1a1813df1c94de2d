// Objects kept in slices (as nginx's slice module and ATS's slice plugin keep
// large files): a head entry under the object's key holds its headers,
// validators and freshness; each fixed-size slice is an entry of its own,
// keyed by the head's key, the version the head names and the slice number,
// so slices of two versions of the object never mix. This file is the byte
// arithmetic and the chopping of one whole body into slices; fetching and
// serving them is the request path's (proxy/slices.ts).

/** What a slice entry's key is made of: the head's key, the head's version and the slice number. */
export function sliceKey(headKey: string, version: string, n: number): string {
  return `${headKey}\x02${version} ${n}`;
}

/** How many slices an object of total bytes has. */
export function sliceCount(total: number, sliceBytes: number): number {
  return Math.ceil(total / sliceBytes);
}

/** The first and last byte of slice n (inclusive). */
export function sliceBounds(n: number, sliceBytes: number, total: number): [number, number] {
  const first = n * sliceBytes;
  return [first, Math.min(first + sliceBytes, total) - 1];
}

export interface ContentRange {
  first: number;
  last: number;
  total: number;
}

/** A 206's `Content-Range: bytes first-last/total` (RFC 9110 §14.4); null for anything else (an unknown total included). */
export function parseContentRange(value: string | undefined): ContentRange | null {
  const m = value === undefined ? null : /^bytes (\d+)-(\d+)\/(\d+)$/.exec(value.trim());
  if (m === null) return null;
  const first = Number(m[1]);
  const last = Number(m[2]);
  const total = Number(m[3]);
  if (!Number.isSafeInteger(total) || last < first || last >= total) return null;
  return { first, last, total };
}

/**
 * The first byte a viewer's single range asks for, or null for a suffix range (`bytes=-N`, which needs the
 * total); undefined when the field is not one satisfiable-looking byte range (several, or malformed).
 */
export function rangeStart(header: string): number | null | undefined {
  const m = /^bytes=\s*(\d*)-(\d*)\s*$/.exec(header);
  if (m === null || (m[1] === '' && m[2] === '')) return undefined;
  if (m[1] === '') return null;
  const start = Number(m[1]);
  if (!Number.isSafeInteger(start) || (m[2] !== '' && Number(m[2]) < start)) return undefined;
  return start;
}

/**
 * One whole body read as consecutive slices: slice n is read only when the body is at its first byte. A body
 * that ends early or runs past total is an error. Ended by dispose() when nobody reads on.
 */
export class SliceSource {
  private readonly iterator: AsyncIterator<Buffer>;
  private readonly sliceBytes: number;
  private readonly total: number;
  private readonly stop: () => void;
  private position = 0;
  private held: Buffer | null = null;

  constructor(body: AsyncIterable<Buffer>, sliceBytes: number, total: number, stop: () => void) {
    this.iterator = body[Symbol.asyncIterator]();
    this.sliceBytes = sliceBytes;
    this.total = total;
    this.stop = stop;
  }

  /** Whether slice n is the next one the body holds. */
  at(n: number): boolean {
    return this.position === n * this.sliceBytes && this.position < this.total;
  }

  /** Reads slice n (at(n) must be true). */
  async read(n: number): Promise<Buffer> {
    const [first, last] = sliceBounds(n, this.sliceBytes, this.total);
    const want = last - first + 1;
    const chunks: Buffer[] = [];
    let got = 0;
    if (this.held !== null) {
      chunks.push(this.held);
      got = this.held.length;
      this.held = null;
    }
    while (got < want) {
      const next = await this.iterator.next();
      if (next.done) throw new Error(`the origin's body ended at byte ${first + got} of ${this.total}`);
      chunks.push(next.value);
      got += next.value.length;
    }
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, got);
    if (got > want) {
      if (last + 1 >= this.total) throw new Error(`the origin's body runs past its length ${this.total}`);
      this.held = all.subarray(want);
    }
    this.position = last + 1;
    return got > want ? all.subarray(0, want) : all;
  }

  dispose(): void {
    this.stop();
  }
}
