// Strong ETags derived from a record's id and version, and the If-Match check
// (412 PRECONDITION_FAILED before anything changes).
import { createHash } from 'node:crypto';
import type { Context } from 'koa';
import { ApiError } from './errors.ts';

export function etagFor(id: string, version: number | string): string {
  return `"${createHash('sha256').update(`${id}:${version}`).digest('base64url').slice(0, 27)}"`;
}

/** Throws 412 when If-Match is present and matches none of the current ETag (strong comparison). */
export function assertIfMatch(ctx: Context, currentEtag: string): void {
  const header = ctx.get('if-match');
  if (!header) return;
  if (header.trim() === '*') return;
  const candidates = header.split(',').map((s) => s.trim());
  // Weak validators never match under the strong comparison If-Match requires (RFC 9110 §13.1.1).
  if (!candidates.some((c) => !c.startsWith('W/') && c === currentEtag)) {
    throw new ApiError('PRECONDITION_FAILED');
  }
}
