// Prefix tokens (issue 36): one token for a whole playback, signed with an
// endpoint's signing key (the same secrets, algorithms and rotation as signed
// URLs, signed-url.ts), naming a path pattern instead of one path. The format:
//
//   payload = [ "st=" start "~" ] "exp=" expires "~acl=" base64url(pattern) [ "~ip=" client_ip ]
//   token   = payload "~hmac=" base64url(HMAC(algorithm, secret, payload))   (no padding)
//
// - pattern: a path as the edge normalises it (see signed-url.ts), either
//   exact ("/videos/123/index.m3u8") or a prefix ending in "*"
//   ("/videos/123/*" covers every path starting "/videos/123/"). It travels
//   base64url-encoded so that the token is the same text in all three places
//   the edge reads it from, a path segment included (where "/" cannot be).
// - start, expires: Unix times in seconds, decimal; accepted from start to
//   expires, both included.
// - client_ip: the viewer's address (IPv4 dotted decimal, IPv6 compact lower
//   case), required by a key with ip_binding_enabled.
// - The signature covers the payload's exact bytes, which start "st=" or
//   "exp=" (a signed URL's canonical string starts "/"): one cannot stand for
//   the other.
// Where the edge takes it from (the key's token_param names all three):
//   query:        /videos/123/index.m3u8?token=<token>
//   cookie:       Cookie: token=<token>
//   path segment: /videos/123/token=<token>/index.m3u8 (removed before routing,
//                 caching and the origin request, so relative URLs in a
//                 playlist carry it to every segment)
// This file depends on node:crypto only, so a customer's back end can copy it.
import { createHmac } from 'node:crypto';

export type PrefixTokenAlgorithm = 'HMAC-SHA256' | 'HMAC-SHA512';

export interface PrefixTokenOptions {
  /** The signing key's secret, as shown once on create or rotate. */
  secret: string;
  /** The signing key's algorithm (default HMAC-SHA256). */
  algorithm?: PrefixTokenAlgorithm;
  /** "/videos/123/*" (a prefix) or "/videos/123/index.m3u8" (one path), as the edge normalises paths. */
  acl: string;
  /** Unix time in seconds: the last second the token is accepted. */
  expires: number;
  /** Unix time in seconds: the first second the token is accepted. */
  start?: number;
  /** The viewer's address, for a key with ip_binding_enabled. */
  ip?: string;
}

/** What a token says, as the edge reads it (parsePrefixToken). */
export interface PrefixToken {
  start: number | null;
  expires: number;
  acl: string;
  ip: string | null;
  /** The bytes the signature covers. */
  payload: string;
  /** The signature, base64url. */
  hmac: string;
}

const TOKEN = /^((?:st=(\d{1,12})~)?exp=(\d{1,12})~acl=([A-Za-z0-9_-]{1,2048})(?:~ip=([0-9A-Fa-f.:]{2,45}))?)~hmac=([A-Za-z0-9_-]{43}|[A-Za-z0-9_-]{86})$/;

/** Why a pattern cannot be signed, or null: one "/..." path, as the edge normalises it, "*" only at the end. */
export function aclProblem(acl: string): string | null {
  if (!acl.startsWith('/')) return 'the pattern must start with "/"';
  const star = acl.indexOf('*');
  if (star !== -1 && star !== acl.length - 1) return 'the pattern may hold "*" only at its end';
  if (/[\s?#\\]/.test(acl)) return 'the pattern may not hold whitespace, "?", "#" or "\\"';
  if (/\/\.\.?(\/|\*?$)/.test(acl)) return 'the pattern may not hold "." or ".." segments';
  if (/%(?![0-9A-F]{2})|%(2D|2E|5F|7E|3[0-9]|[46][1-9A-F]|[57][0-9A]|2F|5C|00)/.test(acl)) return 'percent-encodings must be upper case, unreserved characters not encoded, and "/", "\\" or NUL never';
  return null;
}

/** The token for a pattern (throws on a pattern or time the edge would never accept). */
export function signPrefixToken(options: PrefixTokenOptions): string {
  const problem = aclProblem(options.acl);
  if (problem !== null) throw new Error(`${problem}: ${options.acl}`);
  const seconds = (n: number | undefined) => n === undefined || (Number.isSafeInteger(n) && n >= 0 && n < 1e12);
  if (!seconds(options.expires) || !seconds(options.start)) throw new Error('start and expires must be Unix times in seconds');
  if (options.ip !== undefined && !/^[0-9A-Fa-f.:]{2,45}$/.test(options.ip)) throw new Error(`not an IP address: ${options.ip}`);
  const payload = `${options.start === undefined ? '' : `st=${options.start}~`}exp=${options.expires}~acl=${Buffer.from(options.acl, 'utf8').toString('base64url')}${options.ip === undefined ? '' : `~ip=${options.ip}`}`;
  const digest = (options.algorithm ?? 'HMAC-SHA256') === 'HMAC-SHA512' ? 'sha512' : 'sha256';
  return `${payload}~hmac=${createHmac(digest, options.secret).update(payload).digest('base64url')}`;
}

/** Whether a text has the shape of a prefix token (a signed URL's token never holds "="). */
export function isPrefixToken(text: string): boolean {
  return text.startsWith('exp=') || text.startsWith('st=');
}

/** A token's fields, or null when it is not well formed (the signature is not checked here). */
export function parsePrefixToken(text: string): PrefixToken | null {
  const m = TOKEN.exec(text);
  if (m === null) return null;
  const acl = Buffer.from(m[4]!, 'base64url').toString('utf8');
  if (aclProblem(acl) !== null) return null;
  return { payload: m[1]!, start: m[2] === undefined ? null : Number(m[2]), expires: Number(m[3]), acl, ip: m[5] ?? null, hmac: m[6]! };
}

/** Whether a pattern covers a (normalised) path: a prefix ending in "*", or the exact path. */
export function aclCovers(acl: string, path: string): boolean {
  return acl.endsWith('*') ? path.startsWith(acl.slice(0, -1)) : path === acl;
}

/** The Path attribute of the token's cookie: the pattern's directory ("/videos/123/*" → "/videos/123/"), or the exact path. */
export function cookiePath(acl: string): string {
  return acl.endsWith('*') ? acl.slice(0, acl.lastIndexOf('/') + 1) : acl;
}

/** A Set-Cookie value carrying the token to every request under its pattern (cross-site players included). */
export function prefixTokenCookie(name: string, token: string, acl: string, expires: number): string {
  return `${name}=${token}; Expires=${new Date(expires * 1000).toUTCString()}; Path=${cookiePath(acl)}; Secure; HttpOnly; SameSite=None`;
}

/** A path with the token as a path segment before its last segment ("/videos/123/index.m3u8" → "/videos/123/token=.../index.m3u8"). */
export function pathWithToken(path: string, name: string, token: string): string {
  const slash = path.lastIndexOf('/');
  return `${path.slice(0, slash)}/${name}=${token}${path.slice(slash)}`;
}
