// Compression (document 3 Endpoint.compression; a route's compression_enabled,
// when not null, overrides the endpoint's enabled flag). What the edge
// compresses, and how:
// - only 200 answers whose content type is compressible (COMPRESSIBLE below:
//   text/* but event streams, JSON, XML, JavaScript, HLS/DASH manifests, SVG,
//   WebAssembly, uncompressed fonts and icons), that the origin did not encode
//   (Content-Encoding absent or identity), that do not say
//   Cache-Control: no-transform, and whose length is known to be at least
//   min_size_bytes (a streamed answer without Content-Length counts as large
//   enough, as nginx's gzip_min_length does);
// - never an answer that may hold a secret (BREACH): Cache-Control private or
//   no-store, or a Set-Cookie field; its compressed length would let an
//   attacker who reflects input into the page guess the secret byte by byte;
// - the coding is chosen from Accept-Encoding by q-value among the endpoint's
//   algorithms (listed order breaks ties; q=0 refuses a coding; "*" covers
//   codings not named); none acceptable: the identity answer;
// - br at quality 5 (11 is far too slow to do on the fly), gzip at level 6;
// - the encoded answer carries Content-Encoding, Vary: Accept-Encoding, its
//   own length, no Accept-Ranges, and the ETag with "-br" / "-gzip" appended
//   inside the quotes (weakness kept), so a validator of one representation
//   never matches another; the identity answer of a compressible object
//   carries Vary: Accept-Encoding too;
// - byte ranges are always served from the identity representation (a Range
//   request is never answered compressed, and a 206 is never compressed).
// Stored objects get each encoded variant made once and stored beside them
// (proxy/variants.ts); answers streamed from the origin are encoded on the fly.
import { type Transform } from 'node:stream';
import { promisify } from 'node:util';
import { brotliCompress, constants, createBrotliCompress, createGzip, gzip } from 'node:zlib';
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { withVary } from './head.ts';

export type Coding = 'br' | 'gzip';

export const BROTLI_QUALITY = 5;
export const GZIP_LEVEL = 6;

/** Compressible types besides text/* (event streams excluded) and the +json / +xml suffixes. */
export const COMPRESSIBLE: ReadonlySet<string> = new Set([
  'application/javascript', 'application/x-javascript', 'application/ecmascript', 'application/json', 'application/xml',
  'application/x-mpegurl', 'application/vnd.apple.mpegurl', 'application/wasm', 'application/x-font-ttf', 'application/x-font-otf',
  'application/vnd.ms-fontobject', 'font/ttf', 'font/otf', 'font/collection', 'image/svg+xml', 'image/x-icon', 'image/vnd.microsoft.icon', 'image/bmp',
]);

export function isCompressibleType(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  const semi = contentType.indexOf(';');
  const type = (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
  if (type.startsWith('text/')) return type !== 'text/event-stream';
  return COMPRESSIBLE.has(type) || type.endsWith('+json') || type.endsWith('+xml');
}

const MEMO_LIMIT = 256;

export interface CompressionSettings {
  readonly codings: readonly Coding[];
  readonly minSizeBytes: number;
  /** The coding to answer with for this Accept-Encoding (memoised: browsers send few distinct values), null for identity. */
  negotiate(acceptEncoding: string | undefined): Coding | null;
}

/** The settings in force for the endpoint, or for a route whose compression_enabled (true/false) overrides the endpoint's flag. */
export function compileCompression(c: EndpointSnapshot['compression'], routeEnabled: boolean | null = null): CompressionSettings | null {
  if (!(routeEnabled ?? c.enabled) || c.algorithms.length === 0) return null;
  const codings = [...new Set(c.algorithms)];
  const memo = new Map<string, Coding | null>();
  return {
    codings,
    minSizeBytes: c.min_size_bytes,
    negotiate(acceptEncoding) {
      if (acceptEncoding === undefined || acceptEncoding === '') return null;
      let coding = memo.get(acceptEncoding);
      if (coding === undefined) {
        coding = preferredCoding(acceptEncoding, codings);
        if (memo.size >= MEMO_LIMIT) memo.clear();
        memo.set(acceptEncoding, coding);
      }
      return coding;
    },
  };
}

/** RFC 9110 §12.5.3: the acceptable coding of highest q-value among `codings` (their order breaks ties), null when none is. */
export function preferredCoding(acceptEncoding: string, codings: readonly Coding[]): Coding | null {
  const weights = new Map<string, number>();
  let any: number | undefined;
  for (const part of acceptEncoding.split(',')) {
    const semi = part.indexOf(';');
    const name = (semi === -1 ? part : part.slice(0, semi)).trim().toLowerCase();
    if (name === '') continue;
    let q = 1;
    if (semi !== -1) {
      for (const param of part.slice(semi + 1).split(';')) {
        const eq = param.indexOf('=');
        if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'q') continue;
        const text = param.slice(eq + 1).trim();
        // qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ); anything else refuses the coding.
        q = /^(0(\.\d{0,3})?|1(\.0{0,3})?)$/.test(text) ? Number(text) : 0;
      }
    }
    if (name === '*') any ??= q;
    else if (!weights.has(name)) weights.set(name, q);
  }
  let best: Coding | null = null;
  let bestQ = 0;
  for (const c of codings) {
    const q = weights.get(c) ?? (c === 'gzip' ? weights.get('x-gzip') : undefined) ?? any ?? 0;
    if (q > bestQ) {
      best = c;
      bestQ = q;
    }
  }
  return best;
}

/**
 * Whether a response may be compressed (see the file comment). `field` reads a
 * response field (lower-case name, lines joined); `length` is the body's size,
 * null when unknown (a stream without Content-Length).
 */
export function compressible(status: number, field: (name: string) => string | undefined, length: number | null, settings: CompressionSettings): boolean {
  if (status !== 200) return false;
  const encoding = field('content-encoding');
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') return false;
  if (field('content-range') !== undefined) return false;
  if (length !== null && (length < settings.minSizeBytes || length === 0)) return false;
  const cc = field('cache-control');
  if (cc !== undefined && (NO_TRANSFORM.test(cc) || MAY_HOLD_SECRET.test(cc))) return false;
  if (field('set-cookie') !== undefined) return false;
  return isCompressibleType(field('content-type'));
}

const NO_TRANSFORM = /(^|,)\s*no-transform\s*(=|,|$)/i;
/** private (qualified or not) or no-store: an answer for one viewer, which may carry that viewer's secrets. */
const MAY_HOLD_SECRET = /(^|,)\s*(private|no-store)\s*(=|,|$)/i;

/** The ETag of an encoded representation: the suffix inside the quotes, weakness kept; undefined for none (or one not quoted). */
export function encodedEtag(etag: string | undefined, coding: Coding): string | undefined {
  if (etag === undefined) return undefined;
  const e = etag.trim();
  if (!e.endsWith('"')) return undefined;
  const open = e.startsWith('W/"') ? 3 : e.startsWith('"') ? 1 : -1;
  if (open === -1 || e.length < open + 1) return undefined;
  return `${e.slice(0, -1)}-${coding}"`;
}

/** The head of the encoded representation (a new list): Content-Encoding, Vary, length (null: none, the body is streamed), ETag suffixed, no Accept-Ranges. */
export function encodedHead(head: readonly string[], coding: Coding, length: number | null): string[] {
  const out: string[] = [];
  for (let i = 0; i < head.length; i += 2) {
    const name = head[i];
    if (name === 'content-length' || name === 'accept-ranges' || name === 'content-encoding') continue;
    if (name === 'etag') {
      const etag = encodedEtag(head[i + 1], coding);
      if (etag !== undefined) out.push('etag', etag);
      continue;
    }
    out.push(name, head[i + 1]);
  }
  out.push('content-encoding', coding);
  if (length !== null) out.push('content-length', String(length));
  withVary(out, 'Accept-Encoding');
  return out;
}

const brotli = promisify(brotliCompress);
const gzipAsync = promisify(gzip);

function brotliParams(sizeHint: number): Record<number, number> {
  return { [constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY, [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT, [constants.BROTLI_PARAM_SIZE_HINT]: sizeHint };
}

/** Encodes a whole body (on libuv's thread pool, off the event loop). */
export function compressBuffer(coding: Coding, body: Buffer): Promise<Buffer> {
  return coding === 'br' ? brotli(body, { params: brotliParams(body.length) }) : gzipAsync(body, { level: GZIP_LEVEL });
}

/** An encoding stream for a body streamed from the origin. */
export function compressStream(coding: Coding, sizeHint = 0): Transform {
  return coding === 'br' ? createBrotliCompress({ params: brotliParams(sizeHint) }) : createGzip({ level: GZIP_LEVEL });
}
