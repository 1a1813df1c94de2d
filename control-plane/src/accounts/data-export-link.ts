// The download link of a ready data export: signed, valid until the export's
// expiry (24 hours after it was ready), and usable without a login, since it
// is e-mailed. The signature is an HMAC-SHA256, under a key derived from the
// secrets key for this purpose alone, over the export id and the expiry, so
// neither can be changed; the server checks it against its own clock.
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Key purpose of export links (CoreServices.deriveKey). */
export const EXPORT_LINK_KEY_PURPOSE = 'export-link';

export interface SignedExportLink {
  exportId: string;
  /** Unix time (seconds) after which the link is refused. */
  expires: number;
  signature: string;
}

function sign(key: Buffer, exportId: string, expires: number): string {
  return createHmac('sha256', key).update(`data-export:${exportId}:${expires}`).digest('base64url');
}

/** Signs the link of an export valid until `expiresAt` (rounded down to the second). */
export function signExportLink(key: Buffer, exportId: string, expiresAt: Date): SignedExportLink {
  const expires = Math.floor(expiresAt.getTime() / 1000);
  return { exportId, expires, signature: sign(key, exportId, expires) };
}

/** The absolute URL of a signed link under the API's public address. */
export function exportLinkUrl(publicUrl: string, link: SignedExportLink): string {
  const query = new URLSearchParams({ expires: String(link.expires), signature: link.signature });
  return `${publicUrl}/v1/data-exports/${encodeURIComponent(link.exportId)}/download?${query}`;
}

/**
 * The expiry (seconds) of a presented link whose signature is ours and which
 * has not expired at `nowMs`; null otherwise (tampered, malformed, expired).
 * Callers answer every null alike, so a refusal tells nothing about why.
 */
export function verifyExportLink(key: Buffer, presented: { exportId: string; expires: string; signature: string }, nowMs: number): number | null {
  if (!/^\d{1,12}$/.test(presented.expires)) return null;
  const expires = Number(presented.expires);
  const expected = Buffer.from(sign(key, presented.exportId, expires));
  const given = Buffer.from(presented.signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  if (nowMs >= expires * 1000) return null;
  return expires;
}
