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
import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';
import type { SigningKeySnapshot } from '../../../shared/src/config/snapshot.ts';
import { canonicalClientIp, canonicalString, DIGEST, IP_SEPARATOR, SIGNATURE_CHARS } from '../../../shared/src/signing/signed-url.ts';
import { forbidden } from './answers.ts';
import type { PolicyRequest, RequestPolicy } from './index.ts';

export type SignedUrlFailure = 'missing' | 'malformed' | 'bad_signature' | 'retired_secret' | 'expired' | 'ip_mismatch';

/** With several keys, the failure that got furthest is the one reported. */
const PROGRESS: Record<SignedUrlFailure, number> = { missing: 0, malformed: 1, bad_signature: 2, retired_secret: 3, expired: 4, ip_mismatch: 5 };

interface CompiledKey {
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

/** One key's verdict on the request's parameters: null when it accepts them. */
function verify(key: CompiledKey, ctx: PolicyRequest, token: string, expiresText: string, nowMs: number): SignedUrlFailure | null {
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
  let matched: { validUntil: number } | null = null;
  for (const secret of key.secrets) {
    const expected = Buffer.from(createHmac(key.digest, secret.key).update(canonical).digest('base64url'), 'latin1');
    if (timingSafeEqual(expected, given)) {
      matched = secret;
      break;
    }
  }
  if (matched === null) return 'bad_signature';
  if (nowMs >= matched.validUntil) return 'retired_secret';
  if (Math.floor(nowMs / 1000) > expires) return 'expired';
  if (boundIp !== null && boundIp !== ctx.clientIp) return 'ip_mismatch';
  return null;
}

/** The query without the named parameters, the others as sent and in order. */
function withoutParams(query: string, names: ReadonlySet<string>): string {
  const kept: string[] = [];
  for (const part of query.split('&')) {
    const eq = part.indexOf('=');
    const name = decodeComponent(eq === -1 ? part : part.slice(0, eq));
    if (name === null || !names.has(name)) kept.push(part);
  }
  return kept.join('&');
}

/** The signed-URL check of an endpoint, or null when it has no signing keys (token authentication off). */
export function compileSignedUrls(keys: readonly SigningKeySnapshot[], now: () => number = Date.now): RequestPolicy | null {
  if (keys.length === 0) return null;
  const compiled = keys.map(compileKey);
  const names = new Set(compiled.flatMap((k) => [k.tokenParam, k.expiresParam]));
  return (ctx) => {
    // The signature parameters, by name: a name sent twice is ambiguous (null), and so malformed.
    const params = new Map<string, string | null>();
    let malformed = false;
    if (ctx.query !== '') {
      for (const part of ctx.query.split('&')) {
        const eq = part.indexOf('=');
        const name = decodeComponent(eq === -1 ? part : part.slice(0, eq));
        if (name === null || !names.has(name)) continue;
        const value = decodeComponent(eq === -1 ? '' : part.slice(eq + 1));
        if (value === null) malformed = true;
        params.set(name, params.has(name) ? null : value);
      }
    }
    const nowMs = now();
    let failure: SignedUrlFailure = 'missing';
    for (const key of compiled) {
      const token = params.get(key.tokenParam);
      const expires = params.get(key.expiresParam);
      if (token === undefined && expires === undefined) continue;
      const verdict = malformed || token === undefined || expires === undefined || token === null || expires === null
        ? 'malformed'
        : verify(key, ctx, token, expires, nowMs);
      if (verdict === null) {
        ctx.query = withoutParams(ctx.query, names);
        return null;
      }
      if (PROGRESS[verdict] > PROGRESS[failure]) failure = verdict;
    }
    return forbidden({ policy: 'signed_url', reason: failure });
  };
}
