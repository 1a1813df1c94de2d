// The `challenge` action of IP rules at an edge that runs no browser script: a
// cookie challenge (as nginx's testcookie module does). A viewer the rule
// matches without a valid challenge cookie gets 403 with a cookie bound to
// the endpoint, its address and an expiry, and a small page that reloads
// itself after a second (<meta http-equiv="refresh">, no script) and links
// back; a browser comes back with the cookie and passes for an hour. Clients
// that keep no cookies (most scripted scrapers, simple bots) stay at the 403.
// The cookie is an HMAC under a secret of this agent (a restart, or another
// node, asks again): nothing to configure, nothing to store. With workers, the
// primary gives every worker its own secret (workers/primary.ts), so a viewer
// who passed on one worker passes on the others.
// Regression: each worker drew its own secret, so a viewer whose next
// connection landed on another worker was challenged again.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { PolicyAnswer } from './index.ts';

export const CHALLENGE_COOKIE = '__edge_challenge';
export const CHALLENGE_TTL_SECONDS = 3600;

let SECRET = randomBytes(32);

/** This process's challenge secret (the primary hands it to its workers). */
export function challengeSecret(): Buffer {
  return SECRET;
}

/** Adopts the agent's challenge secret (a worker, from its primary). */
export function useChallengeSecret(secret: Buffer): void {
  if (secret.length < 32) throw new Error('challenge secret too short');
  SECRET = Buffer.from(secret);
}
const MAC_CHARS = 32;

function mac(endpointId: string, clientIp: string, expires: number): string {
  return createHmac('sha256', SECRET).update(`${endpointId}\n${clientIp}\n${expires}`).digest('base64url').slice(0, MAC_CHARS);
}

/** The value of the challenge cookie the Cookie header carries, if any. */
function cookieValue(req: IncomingMessage): string | undefined {
  const header = req.headers.cookie;
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq !== -1 && part.slice(0, eq).trim() === CHALLENGE_COOKIE) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Whether the request carries a cookie this agent issued to this address for this endpoint, not expired. */
export function challengePassed(req: IncomingMessage, endpointId: string, clientIp: string, nowMs: number): boolean {
  const value = cookieValue(req);
  if (value === undefined) return false;
  const dot = value.indexOf('.');
  if (dot === -1 || value.length - dot - 1 !== MAC_CHARS) return false;
  const expires = Number(value.slice(0, dot));
  if (!Number.isSafeInteger(expires) || expires * 1000 <= nowMs) return false;
  return timingSafeEqual(Buffer.from(value.slice(dot + 1)), Buffer.from(mac(endpointId, clientIp, expires)));
}

const PAGE = '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="1"><title>Checking your browser</title>'
  + '<p>Checking your browser. This page reloads by itself; if it does not, <a href="">continue</a>. Cookies must be enabled.</p>\n';

/** The 403 that sets the cookie and asks the browser to come back. */
export function challengeAnswer(endpointId: string, clientIp: string, nowMs: number, secure: boolean): PolicyAnswer {
  const expires = Math.floor(nowMs / 1000) + CHALLENGE_TTL_SECONDS;
  const cookie = `${CHALLENGE_COOKIE}=${expires}.${mac(endpointId, clientIp, expires)}; Max-Age=${CHALLENGE_TTL_SECONDS}; Path=/; HttpOnly; SameSite=Lax${secure ? '; Secure' : ''}`;
  return {
    status: 403,
    headers: ['content-type', 'text/html; charset=utf-8', 'content-length', String(Buffer.byteLength(PAGE)), 'cache-control', 'no-store', 'set-cookie', cookie],
    body: PAGE,
    denial: { policy: 'ip_rule', reason: 'challenge' },
  };
}
