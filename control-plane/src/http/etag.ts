// Strong ETags derived from a record's id and version, the If-Match check
// (412 PRECONDITION_FAILED before anything changes) and If-None-Match on
// reads. The router applies them to every route that declares a versioned
// record; no handler computes or compares an ETag itself.
import { createHash } from 'node:crypto';
import { ApiError } from './errors.ts';

export function etagFor(id: string, version: number | string): string {
  return `"${createHash('sha256').update(`${id}:${version}`).digest('base64url').slice(0, 27)}"`;
}

const candidates = (header: string) => header.split(',').map((s) => s.trim());

/** Throws 412 when If-Match is present and matches none of the current ETag (strong comparison). */
export function assertIfMatch(header: string, current: { id: string; version: number }): void {
  if (!header || header.trim() === '*') return;
  const etag = etagFor(current.id, current.version);
  // Weak validators never match under the strong comparison If-Match requires (RFC 9110 §13.1.1).
  if (!candidates(header).some((c) => !c.startsWith('W/') && c === etag)) {
    throw new ApiError('PRECONDITION_FAILED');
  }
}

/** If-None-Match on a read: true when the client already holds this version (weak comparison, RFC 9110 §13.1.2). */
export function ifNoneMatchHits(header: string, etag: string | undefined): boolean {
  if (!header || !etag) return false;
  if (header.trim() === '*') return true;
  const strip = (tag: string) => (tag.startsWith('W/') ? tag.slice(2) : tag);
  return candidates(header).some((c) => strip(c) === etag);
}
