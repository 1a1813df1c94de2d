// Custom error pages (document 3 Endpoint.custom_error_pages). An answer of
// the endpoint whose status is a listed error_code (from the origin, from the
// cache, or made by the edge itself: a refusal, an origin failure, a request
// policy's 403) is answered instead with the page at response_page_path on the
// endpoint's default origin, with response_code when given (else the original
// status). The page is fetched once and kept for ttl_seconds (proxy/
// error-pages.ts keeps it in the cache store, so purges reach it); it is the
// first step of the exit, so the header policy then applies to the page's
// answer like to any other. A page that cannot be fetched (an error, a non-2xx
// answer, more than MAX_PAGE_BYTES, no answer within the timeout) leaves the
// original answer as it was.
import { errorPageProblems } from '../../../shared/src/config/response-policies.ts';
import type { EndpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { normalizePath } from '../../../shared/src/match/path.ts';
import { withoutHeaders } from './head.ts';

/** Larger pages are not used (the original answer stands). */
export const MAX_PAGE_BYTES = 1024 * 1024;

export interface ErrorPageRule {
  readonly errorCode: number;
  /** Normalised path (the unit of purges). */
  readonly path: string;
  /** What is asked of the origin: the path plus the query the operator wrote, if any. */
  readonly target: string;
  readonly responseCode: number | null;
  readonly ttlMs: number;
}

export type ErrorPageTable = ReadonlyMap<number, ErrorPageRule>;

/** The endpoint's pages by error code, null when it has none; throws when one could not be fetched as written. */
export function compileErrorPages(e: Pick<EndpointSnapshot, 'id' | 'custom_error_pages'>): ErrorPageTable | null {
  if (e.custom_error_pages.length === 0) return null;
  const problems = errorPageProblems(e.custom_error_pages);
  if (problems.length > 0) throw new Error(`endpoint ${e.id}: ${problems.map((p) => `${p.field}: ${p.message}`).join('; ')}`);
  const table = new Map<number, ErrorPageRule>();
  for (const page of e.custom_error_pages) {
    const q = page.response_page_path.indexOf('?');
    const path = normalizePath(q === -1 ? page.response_page_path : page.response_page_path.slice(0, q))!;
    table.set(page.error_code, {
      errorCode: page.error_code,
      path,
      target: q === -1 ? path : path + page.response_page_path.slice(q),
      responseCode: page.response_code,
      ttlMs: page.ttl_seconds * 1000,
    });
  }
  return table;
}

/** Fields that describe the original answer's body: they go when the page replaces it. */
const REPRESENTATION_FIELDS: ReadonlySet<string> = new Set([
  'content-type', 'content-length', 'content-encoding', 'content-range', 'content-language', 'content-location', 'content-disposition',
  'etag', 'last-modified', 'accept-ranges', 'digest', 'content-digest', 'repr-digest',
]);

/** The head of the page's answer: the original's fields about the exchange (cache status, cache-control…), the page's type and length. */
export function pageHead(original: readonly string[], contentType: string | undefined, length: number): string[] {
  const out = withoutHeaders(original, REPRESENTATION_FIELDS);
  if (contentType !== undefined) out.push('content-type', contentType);
  out.push('content-length', String(length));
  return out;
}
