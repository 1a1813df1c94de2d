// Signed URLs (document 3 §4.8): the one definition of what a signature covers,
// used by the edge to verify (edge-agent/src/policy/signed-urls.ts) and by the
// `npm run sign-url` command and customers' code to sign. The algorithm:
//
//   canonical = path + "\n" + expires                    (ip_binding_enabled false)
//   canonical = path + "\n" + expires + "\n" + client_ip (ip_binding_enabled true)
//   signature = base64url(HMAC(algorithm, secret, canonical)), no padding
//   token     = signature                                (ip_binding_enabled false)
//   token     = client_ip + "~" + signature              (ip_binding_enabled true)
//   URL       = path ? [other parameters &] expires_param=expires & token_param=token
//
// - path: the URL's path as the edge sees it after normalisation (dot
//   segments removed, percent-encoded unreserved characters decoded, other
//   percent-encodings upper-case), without the query; "/videos/a b.mp4" is
//   signed as "/videos/a%20b.mp4".
// - expires: Unix time in seconds, decimal; the URL is accepted up to and
//   including that second.
// - client_ip: IPv4 dotted decimal, IPv6 compact lower case (RFC 5952), an
//   IPv4-mapped IPv6 address as its IPv4 address.
// - secret: the key's secret as UTF-8 bytes (as shown once on create/rotate).
// Other query parameters are not signed: they reach the cache key and the
// origin as sent, the two signature parameters never do.
import { createHmac, type KeyObject } from 'node:crypto';
import { parseAddress } from '../match/cidr.ts';
import { normalizePath } from '../match/path.ts';

export const SIGNING_ALGORITHMS = ['HMAC-SHA256', 'HMAC-SHA512'] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

/** node:crypto's digest name of each algorithm. */
export const DIGEST: Record<SigningAlgorithm, 'sha256' | 'sha512'> = { 'HMAC-SHA256': 'sha256', 'HMAC-SHA512': 'sha512' };
/** Length of a signature in base64url characters (32 and 64 bytes, unpadded). */
export const SIGNATURE_CHARS: Record<SigningAlgorithm, number> = { 'HMAC-SHA256': 43, 'HMAC-SHA512': 86 };
/** Separates the bound client address from the signature in the token of an IP-bound key. */
export const IP_SEPARATOR = '~';

/** The string a signature covers. */
export function canonicalString(path: string, expires: number, clientIp: string | null): string {
  return clientIp === null ? `${path}\n${expires}` : `${path}\n${expires}\n${clientIp}`;
}

/** The canonical text of a client address (what IP-bound signatures cover), or null when it is not an address. */
export function canonicalClientIp(text: string): string | null {
  const addr = parseAddress(text.trim());
  return addr === null ? null : addr.toString();
}

/** The base64url HMAC of the canonical string (the secret as text, or bound once as a KeyObject). */
export function urlSignature(algorithm: SigningAlgorithm, secret: string | KeyObject, path: string, expires: number, clientIp: string | null): string {
  return createHmac(DIGEST[algorithm], secret).update(canonicalString(path, expires, clientIp)).digest('base64url');
}

export interface SignOptions {
  /** A path ("/videos/a.mp4"), optionally with a query ("/a.mp4?quality=hd"). */
  path: string;
  /** Unix time in seconds after which the URL is refused. */
  expires: number;
  secret: string;
  algorithm?: SigningAlgorithm;
  tokenParam?: string;
  expiresParam?: string;
  /** The viewer's address, for a key with ip_binding_enabled. */
  clientIp?: string | null;
}

/**
 * The signed form of a path (and its query): the normalised path, the query
 * as given, then `expires_param=...&token_param=...`. Throws on a path the
 * edge would refuse, a bad expiry or client address.
 */
export function signPath(options: SignOptions): string {
  const algorithm = options.algorithm ?? 'HMAC-SHA256';
  const q = options.path.indexOf('?');
  const rawPath = q === -1 ? options.path : options.path.slice(0, q);
  const query = q === -1 ? '' : options.path.slice(q + 1);
  const path = normalizePath(rawPath);
  if (path === null) throw new Error(`not a path the edge accepts: ${rawPath}`);
  if (!Number.isSafeInteger(options.expires) || options.expires < 0) throw new Error(`expires must be a Unix time in seconds, got ${options.expires}`);
  let ip: string | null = null;
  if (options.clientIp !== undefined && options.clientIp !== null) {
    ip = canonicalClientIp(options.clientIp);
    if (ip === null) throw new Error(`not an IP address: ${options.clientIp}`);
  }
  const signature = urlSignature(algorithm, options.secret, path, options.expires, ip);
  const token = ip === null ? signature : `${ip}${IP_SEPARATOR}${signature}`;
  const params = `${encodeURIComponent(options.expiresParam ?? 'expires')}=${options.expires}&${encodeURIComponent(options.tokenParam ?? 'token')}=${encodeURIComponent(token)}`;
  return `${path}?${query === '' ? '' : `${query}&`}${params}`;
}
