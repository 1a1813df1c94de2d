// Idempotency-Key (DESIGN.md §4): stored per (caller, key) with a fingerprint
// of method + path + body for 24 hours. A replay returns the stored status and
// body; the same key with another request gets 422; a concurrent duplicate
// waits for the first to finish and then gets its result, so the action runs once.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KeyValueStore } from '../store/index.ts';
import { ApiError } from './errors.ts';
import { errorBody } from './error-handler.ts';
import type { SentReply } from './route.ts';

export const REPLAY_WINDOW_MS = 24 * 60 * 60 * 1000;
// A claim outlives no crash by long: after this the key can be used again.
const CLAIM_MS = 60_000;

interface IdempotencyRecord {
  state: 'running' | 'done';
  fingerprint: string;
  reply?: SentReply;
}

export function requestFingerprint(method: string, path: string, body: unknown): string {
  return createHash('sha256').update(`${method.toUpperCase()} ${path}\n${canonicalJson(body ?? null)}`).digest('base64url');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Errors that describe the request's outcome (a replay should see them again); others let the key be retried. */
function isFinalError(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status >= 400 && error.status < 500 && ![401, 403, 408, 409, 412, 429].includes(error.status);
}

export interface IdempotencyOptions {
  store: KeyValueStore;
  caller: string;
  key: string;
  fingerprint: string;
  /** Of the request that runs the action: a recorded error body carries it, as every error body does. */
  requestId: string;
  /** How long a duplicate waits for the first request before 409. */
  waitMs?: number;
}

/**
 * An idempotent request under way: the claim of its key is sent at once (`beginIdempotency`), so it travels to
 * Redis with the route's rate-limit command in one write (ioredis pipelines commands issued in the same tick)
 * rather than one round trip after it. Before the handler runs, the request may still be refused (rate limit,
 * validation, permission, precondition): `abandon` then gives the key back, as if it had never been claimed.
 */
export interface IdempotentRequest {
  run(action: () => Promise<SentReply>): Promise<SentReply>;
  abandon(): Promise<void>;
}

/** Where the key of `caller` is kept: the caller and the key's hash (also the key a route claiming it in its own statement stores). */
export function idempotencyStoreKey(caller: string, key: string): string {
  return `${caller}:${createHash('sha256').update(key).digest('base64url')}`;
}

export function beginIdempotency(options: IdempotencyOptions): IdempotentRequest {
  const { store, fingerprint } = options;
  const storeKey = `idem:${idempotencyStoreKey(options.caller, options.key)}`;
  const running = JSON.stringify({ state: 'running', fingerprint } satisfies IdempotencyRecord);
  const claim = () => store.set(storeKey, running, { ttlMs: CLAIM_MS, onlyIfAbsent: true });
  const first = claim();
  // Not awaited if the request is refused before it runs and abandon() is not reached (a thrown store error).
  first.catch(() => {});
  return {
    async run(action) {
      const deadline = Date.now() + (options.waitMs ?? 10_000);
      for (let attempt = 0; ; attempt++) {
        const claimed = await (attempt === 0 ? first : claim());
        if (claimed) return runAndRecord(store, storeKey, fingerprint, options.requestId, action);

        const raw = await store.get(storeKey);
        if (raw === null) continue; // expired between the two calls: claim again
        const record = JSON.parse(raw) as IdempotencyRecord;
        if (record.fingerprint !== fingerprint) {
          throw new ApiError('IDEMPOTENCY_KEY_REUSED', 'This Idempotency-Key was used with a different request');
        }
        if (record.state === 'done' && record.reply) {
          return { ...record.reply, headers: { ...record.reply.headers, 'idempotent-replayed': 'true' } };
        }
        if (Date.now() >= deadline) {
          throw new ApiError('IDEMPOTENCY_KEY_IN_USE', 'A request with this Idempotency-Key is still being processed', { headers: { 'retry-after': '1' } });
        }
        await sleep(25);
      }
    },
    async abandon() {
      if (await first.catch(() => false)) await store.del(storeKey);
    },
  };
}

async function runAndRecord(store: KeyValueStore, storeKey: string, fingerprint: string, requestId: string, run: () => Promise<SentReply>): Promise<SentReply> {
  let reply: SentReply;
  try {
    reply = await run();
  } catch (error) {
    if (isFinalError(error)) {
      const errorReply: SentReply = {
        status: error.status,
        body: errorBody(error, requestId),
        headers: error.headers,
      };
      await store.set(storeKey, JSON.stringify({ state: 'done', fingerprint, reply: errorReply } satisfies IdempotencyRecord), { ttlMs: REPLAY_WINDOW_MS });
    } else {
      await store.del(storeKey);
    }
    throw error;
  }
  if (reply.status >= 500) await store.del(storeKey);
  else await store.set(storeKey, JSON.stringify({ state: 'done', fingerprint, reply } satisfies IdempotencyRecord), { ttlMs: REPLAY_WINDOW_MS });
  return reply;
}
