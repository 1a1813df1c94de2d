// Signed URLs (document 3 §4.8): with token authentication on, the snapshot
// carries the endpoint's signing keys and every request must carry a token and
// an expiry that one of them signed (the algorithm: shared/src/signing/
// signed-url.ts). Every active key is accepted, each with its current secret
// and any replaced secret until its valid_until (the end of a rotation's grace
// period); signatures are compared in constant time. A refusal is the one 403
// of answers.ts; the reason (missing, malformed, bad_signature,
// retired_secret, expired, ip_mismatch) goes to the access record and the
// metrics only. An accepted request continues without the signature
// parameters: they are taken out of the query that the cache key and the
// origin request are made from.
//
// Prefix tokens (shared/src/signing/prefix-token.ts) use the same keys: a
// token naming a path pattern, taken from the key's token_param in the query,
// else a path segment `<token_param>=<token>` (taken out of the path before
// routing: takePathToken), else a cookie of that name. Any accepted source
// passes; the reasons add not_yet_valid and pattern_mismatch (the normalised
// path, without the token segment, outside the pattern). Token cookies are
// taken out of the Cookie field that is forwarded.
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import type { SigningKeySnapshot } from '../../../shared/src/config/snapshot.ts';
import { isPrefixToken, parsePrefixToken } from '../../../shared/src/signing/prefix-token.ts';
import { canonicalClientIp, canonicalString, DIGEST, IP_SEPARATOR, SIGNATURE_CHARS } from '../../../shared/src/signing/signed-url.ts';
import { forbidden } from './answers.ts';
import type { PolicyRequest, RequestPolicy } from './index.ts';

export type SignedUrlFailure = 'missing' | 'malformed' | 'bad_signature' | 'retired_secret' | 'expired' | 'not_yet_valid' | 'pattern_mismatch' | 'ip_mismatch';

/** With several keys or token sources, the failure that got furthest is the one reported. */
const PROGRESS: Record<SignedUrlFailure, number> = {
  missing: 0, malformed: 1, bad_signature: 2, retired_secret: 3, expired: 4, not_yet_valid: 5, pattern_mismatch: 6, ip_mismatch: 7,
};

interface CompiledKey {
  /** Unique per compilation (the verified-signature cache's key prefix). */
  id: number;
  digest: 'sha256' | 'sha512';
  signatureChars: number;
  tokenParam: string;
  expiresParam: string;
  ipBinding: boolean;
  /** The current secret first; replaced ones accepted until validUntil (ms; Infinity for the current one). */
  secrets: { key: KeyObject; validUntil: number }[];
}

const BASE64URL = /^[A-Za-z0-9_-]+$/;
const DECIMAL = /^\d{1,12}$/;

function decodeComponent(s: string): string | null {
  if (!s.includes('%') && !s.includes('+')) return s;
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return null;
  }
}

function compileKey(k: SigningKeySnapshot): CompiledKey {
  return {
    id: ++compiledKeys,
    digest: DIGEST[k.algorithm],
    signatureChars: SIGNATURE_CHARS[k.algorithm],
    tokenParam: k.token_param,
    expiresParam: k.expires_param,
    ipBinding: k.ip_binding_enabled,
    secrets: k.secrets.map((s) => {
      const validUntil = s.valid_until === null ? Infinity : Date.parse(s.valid_until);
      if (Number.isNaN(validUntil)) throw new Error(`signing key ${k.id}: valid_until ${JSON.stringify(s.valid_until)} is not a date`);
      return { key: createSecretKey(Buffer.from(s.secret, 'utf8')), validUntil };
    }),
  };
}

/**
 * Signatures verified recently (an HMAC costs 3–4 µs here, more than the rest
 * of a cache hit's policy work): one cache for the process, bounded, keyed by
 * the token as sent, each entry naming the compiled key (a new configuration
 * compiles new keys, so a rotation or a deleted key never reuses an entry),
 * the path and the expiry it was verified for: a lookup hashes the token alone
 * and compares the rest, instead of building and hashing a key of all four.
 * Only a matching signature is kept, with the end of its secret's acceptance;
 * the clock and the viewer's address are still checked on every request. A
 * player fetching the same signed URL again (manifests, seeks) costs a map
 * lookup.
 */
interface Verified {
  key: number;
  /** A signed URL's path; a prefix token's pattern (without its "*"). */
  path: string;
  /** A prefix token's pattern ends in "*" (false: exact; always false for a signed URL). */
  prefix: boolean;
  /** A signed URL's expiry as sent ('' for a prefix token: its fields are in the token). */
  expiresText: string;
  expires: number;
  /** A prefix token's start (0: none, and for a signed URL). */
  start: number;
  boundIp: string | null;
  validUntil: number;
}
const VERIFIED_MAX = 100_000;
let verifiedYoung = new Map<string, Verified>();
let verifiedOld = new Map<string, Verified>();

/** Two generations make an approximate LRU at the cost of a Map read or two (lru-cache's bookkeeping cost more than the rest of the check). */
function verifiedGet(token: string): Verified | undefined {
  const young = verifiedYoung.get(token);
  if (young !== undefined) return young;
  const old = verifiedOld.get(token);
  if (old !== undefined) verifiedSet(token, old);
  return old;
}

function verifiedSet(token: string, value: Verified): void {
  if (verifiedYoung.size >= VERIFIED_MAX / 2) {
    verifiedOld = verifiedYoung;
    verifiedYoung = new Map();
  }
  verifiedYoung.set(token, value);
}
let compiledKeys = 0;

/** One key's verdict on the request's parameters: null when it accepts them. */
function verify(key: CompiledKey, ctx: PolicyRequest, token: string, expiresText: string, nowMs: number): SignedUrlFailure | null {
  // The same token verified before for this key, path and expiry: its format and signature were checked then.
  const seen = verifiedGet(token);
  if (seen !== undefined && seen.key === key.id && seen.path === ctx.path && seen.expiresText === expiresText) return acceptance(seen, ctx, nowMs);
  if (!DECIMAL.test(expiresText)) return 'malformed';
  let signature = token;
  let boundIp: string | null = null;
  if (key.ipBinding) {
    const sep = token.lastIndexOf(IP_SEPARATOR);
    if (sep === -1) return 'malformed';
    boundIp = canonicalClientIp(token.slice(0, sep));
    signature = token.slice(sep + 1);
    if (boundIp === null) return 'malformed';
  }
  if (signature.length !== key.signatureChars || !BASE64URL.test(signature)) return 'malformed';
  const expires = Number(expiresText);
  const canonical = canonicalString(ctx.path, expires, boundIp);
  const given = Buffer.from(signature, 'latin1');
  for (const secret of key.secrets) {
    const expected = Buffer.from(createHmac(key.digest, secret.key).update(canonical).digest('base64url'), 'latin1');
    if (timingSafeEqual(expected, given)) {
      const verified: Verified = { key: key.id, path: ctx.path, prefix: false, expiresText, expires, start: 0, boundIp, validUntil: secret.validUntil };
      verifiedSet(token, verified);
      return acceptance(verified, ctx, nowMs);
    }
  }
  return 'bad_signature';
}

/** What is checked on every request once the signature matched: the secret's acceptance, the expiry, the bound address. */
function acceptance(v: Verified, ctx: PolicyRequest, nowMs: number): SignedUrlFailure | null {
  if (nowMs >= v.validUntil) return 'retired_secret';
  if (Math.floor(nowMs / 1000) > v.expires) return 'expired';
  if (v.boundIp !== null && v.boundIp !== ctx.clientIp) return 'ip_mismatch';
  return null;
}

/** One key's verdict on a prefix token (remembered once verified, like a signed URL's signature, under the token's text). */
function verifyPrefix(key: CompiledKey, ctx: PolicyRequest, token: string, nowMs: number): SignedUrlFailure | null {
  const seen = verifiedGet(token);
  if (seen !== undefined && seen.key === key.id && seen.expiresText === '') return prefixAcceptance(seen, ctx, nowMs);
  const parsed = parsePrefixToken(token);
  if (parsed === null || parsed.hmac.length !== key.signatureChars || (key.ipBinding && parsed.ip === null)) return 'malformed';
  const boundIp = parsed.ip === null ? null : canonicalClientIp(parsed.ip);
  if (parsed.ip !== null && boundIp === null) return 'malformed';
  const given = Buffer.from(parsed.hmac, 'latin1');
  for (const secret of key.secrets) {
    const expected = Buffer.from(createHmac(key.digest, secret.key).update(parsed.payload).digest('base64url'), 'latin1');
    if (timingSafeEqual(expected, given)) {
      const prefix = parsed.acl.endsWith('*');
      const verified: Verified = {
        key: key.id, path: prefix ? parsed.acl.slice(0, -1) : parsed.acl, prefix, expiresText: '', expires: parsed.expires,
        start: parsed.start ?? 0, boundIp, validUntil: secret.validUntil,
      };
      verifiedSet(token, verified);
      return prefixAcceptance(verified, ctx, nowMs);
    }
  }
  return 'bad_signature';
}

/** A signed URL's checks plus the start and the pattern, on every request. */
function prefixAcceptance(v: Verified, ctx: PolicyRequest, nowMs: number): SignedUrlFailure | null {
  if (nowMs >= v.validUntil) return 'retired_secret';
  const seconds = Math.floor(nowMs / 1000);
  if (seconds > v.expires) return 'expired';
  if (seconds < v.start) return 'not_yet_valid';
  if (v.prefix ? !ctx.path.startsWith(v.path) : ctx.path !== v.path) return 'pattern_mismatch';
  if (v.boundIp !== null && v.boundIp !== ctx.clientIp) return 'ip_mismatch';
  return null;
}

/**
 * A path without its prefix-token segments (`/<name>=<token>`, name one of the
 * keys' token_params), and the token; null when it has none (one scan: paths
 * without "=" return at once). Run on the normalised path before routing, so
 * routes, cache rules, the cache key and the origin request never see it.
 */
export function takePathToken(path: string, names: readonly string[]): { path: string; token: { name: string; value: string | null } } | null {
  if (path.indexOf('=') === -1) return null;
  let out = '';
  let token: { name: string; value: string | null } | null = null;
  for (let start = 1; start <= path.length;) {
    let end = path.indexOf('/', start);
    if (end === -1) end = path.length;
    const eq = path.indexOf('=', start);
    const name = eq !== -1 && eq < end ? path.slice(start, eq) : null;
    if (name !== null && names.includes(name)) {
      const value = decodeComponent(path.slice(eq + 1, end).replace(/\+/g, '%2B'));
      token = token === null ? { name, value } : { name, value: null };
    } else {
      out += `/${path.slice(start, end)}`;
    }
    start = end + 1;
  }
  return token === null ? null : { path: out === '' ? '/' : out, token };
}

/** The token_params a path segment may carry a prefix token under (none without signing keys). */
export function pathTokenNames(keys: readonly SigningKeySnapshot[]): string[] {
  return [...new Set(keys.map((k) => k.token_param))];
}

/** A Cookie field without the cookies named by the keys' token_params (undefined when nothing is left). */
function withoutTokenCookies(cookie: string, names: readonly string[]): string | undefined {
  const kept = cookie.split(';').filter((part) => {
    const eq = part.indexOf('=');
    return !names.includes((eq === -1 ? part : part.slice(0, eq)).trim());
  });
  return kept.length === 0 ? undefined : kept.map((p) => p.trim()).join('; ');
}

/** The signature parameters of a query, and the query without them (the others as sent and in order), in one pass. */
interface SignatureParams {
  /** By the index of the name in the compiled list: undefined when absent, null for a name sent twice (ambiguous, so malformed). */
  values: (string | null | undefined)[];
  malformed: boolean;
  rest: string;
}

function splitQuery(query: string, names: readonly string[]): SignatureParams {
  const values: (string | null | undefined)[] = new Array(names.length);
  let malformed = false;
  let rest = '';
  for (let start = 0; start <= query.length;) {
    let end = query.indexOf('&', start);
    if (end === -1) end = query.length;
    const eq = query.indexOf('=', start);
    const nameEnd = eq === -1 || eq > end ? end : eq;
    const name = decodeComponent(query.slice(start, nameEnd));
    const at = name === null ? -1 : names.indexOf(name);
    if (at !== -1) {
      const value = decodeComponent(nameEnd === end ? '' : query.slice(nameEnd + 1, end));
      if (value === null) malformed = true;
      values[at] = values[at] !== undefined ? null : value;
    } else if (end > start || end < query.length) {
      rest = rest === '' ? query.slice(start, end) : `${rest}&${query.slice(start, end)}`;
    }
    start = end + 1;
  }
  return { values, malformed, rest };
}

/** The signed-URL check of an endpoint, or null when it has no signing keys (token authentication off). */
export function compileSignedUrls(keys: readonly SigningKeySnapshot[], now: () => number = Date.now): RequestPolicy | null {
  if (keys.length === 0) return null;
  const compiled = keys.map(compileKey);
  const names = [...new Set(compiled.flatMap((k) => [k.tokenParam, k.expiresParam]))];
  const slots = compiled.map((k) => ({ key: k, token: names.indexOf(k.tokenParam), expires: names.indexOf(k.expiresParam) }));
  const tokenNames = pathTokenNames(keys);
  /** Accepted: the query without the signature parameters, the Cookie field without the token cookies. */
  const accept = (ctx: PolicyRequest, rest: string): null => {
    ctx.query = rest;
    const cookie = ctx.cookie;
    if (cookie !== undefined && tokenNames.some((n) => cookie.includes(n))) ctx.cookie = withoutTokenCookies(cookie, tokenNames);
    return null;
  };
  return (ctx) => {
    const params = splitQuery(ctx.query, names);
    const nowMs = now();
    let failure: SignedUrlFailure = 'missing';
    for (const { key, token: tokenAt, expires: expiresAt } of slots) {
      const token = params.values[tokenAt];
      const expires = params.values[expiresAt];
      if (token === undefined && expires === undefined) continue;
      const verdict = params.malformed || token === undefined || token === null || expires === null
        ? 'malformed'
        : isPrefixToken(token)
          ? expires === undefined ? verifyPrefix(key, ctx, token, nowMs) : 'malformed'
          : expires === undefined ? 'malformed' : verify(key, ctx, token, expires, nowMs);
      if (verdict === null) return accept(ctx, params.rest);
      if (PROGRESS[verdict] > PROGRESS[failure]) failure = verdict;
    }
    // No query token passed: a token in a path segment, then in a cookie (prefix tokens only).
    const inPath = ctx.pathToken;
    if (inPath !== undefined && inPath !== null) {
      for (const { key } of slots) {
        if (key.tokenParam !== inPath.name) continue;
        const verdict = inPath.value === null || !isPrefixToken(inPath.value) ? 'malformed' : verifyPrefix(key, ctx, inPath.value, nowMs);
        if (verdict === null) return accept(ctx, params.rest);
        if (PROGRESS[verdict] > PROGRESS[failure]) failure = verdict;
      }
    }
    const cookie = ctx.cookie;
    if (cookie !== undefined) {
      for (const part of cookie.split(';')) {
        const eq = part.indexOf('=');
        if (eq === -1) continue;
        const name = part.slice(0, eq).trim();
        const value = part.slice(eq + 1).trim();
        // Another cookie of that name (the site's own) is not a token: only the prefix token's shape is read.
        if (!isPrefixToken(value)) continue;
        for (const { key } of slots) {
          if (key.tokenParam !== name) continue;
          const verdict = verifyPrefix(key, ctx, value, nowMs);
          if (verdict === null) return accept(ctx, params.rest);
          if (PROGRESS[verdict] > PROGRESS[failure]) failure = verdict;
        }
      }
    }
    return forbidden({ policy: 'signed_url', reason: failure });
  };
}
