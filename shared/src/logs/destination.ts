// What a log drain's destination is to the code that ships to it (the agent's
// drains and the control plane's connectivity test use the same clients,
// issue 24 items 2 and 3): a batch of rendered lines goes out in one request
// (or one object), and a failure says whether trying again may help. Every
// request goes through a dispatcher whose connector checks the address it
// dials with the origins' SSRF rules (shared/src/match/cidr.ts), so a name
// that resolves to a refused address later (DNS rebinding) is never dialled,
// and every wait is bounded. Error messages never carry a credential.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Agent, buildConnector, request, type Dispatcher } from 'undici';
import { originAddressAllowed } from '../match/cidr.ts';
import type { LogFormat } from './access-record.ts';

/**
 * A batch of records rendered for one drain: their lines as UTF-8 bytes, each
 * followed by a newline (a line never holds one: JSON escapes it, W3C entries
 * percent-encode it). Bytes rather than strings, so a buffer of records is a
 * few large objects for the garbage collector, not one string per record.
 */
export interface Batch {
  /** Unique and kept across retries: object keys and the X-Batch-Id header are made from it, so a retried batch is one object. */
  id: string;
  body: Buffer;
  count: number;
  /** Per record: its time (ms), and its request id when the destination needs ids (Destination.needsIds). */
  times: number[];
  ids: string[];
}

/** A batch made of lines (tests, the control plane's connectivity test). */
export function batchOfLines(id: string, lines: readonly string[], times: number[], ids: string[]): Batch {
  return { id, body: Buffer.from(lines.map((l) => `${l}\n`).join('')), count: lines.length, times, ids };
}

/** The batch's lines as strings (destinations that wrap each record). */
export function batchLines(batch: Batch): string[] {
  const text = batch.body.toString('utf8');
  return text.length ? text.slice(0, -1).split('\n') : [];
}

/** The drain as a destination sees it: the snapshot entry's members it needs. */
export interface DrainSpec {
  id: string;
  destination_type: 's3' | 'datadog' | 'elasticsearch' | 'http' | 'gcs';
  /** The destination's members with their credentials in clear. */
  destination_config: Record<string, unknown>;
  log_format: LogFormat;
  fields: readonly string[];
}

export interface Destination {
  /** The format its lines are rendered in (Elasticsearch and Datadog take JSON documents whatever the drain says). */
  readonly lineFormat: LogFormat;
  /** It reads the records' request ids (Batch.ids); others get an empty list, and nothing per record is kept for them. */
  readonly needsIds?: boolean;
  /** Sends the batch; throws DeliveryError. */
  send(batch: Batch, signal?: AbortSignal): Promise<void>;
}

export class DeliveryError extends Error {
  /** Trying again later may succeed (network, 5xx, 429, timeouts); false: it will not until the configuration changes. */
  readonly retryable: boolean;

  constructor(message: string, retryable: boolean) {
    super(message);
    this.retryable = retryable;
  }
}

export interface DestinationContext {
  /** The node's name in object keys and Datadog's hostname. */
  nodeName: string;
  /** Bound on each request (connection, head and body). */
  timeoutMs?: number;
  /** Dispatcher override (tests); by default one guarded by the drain's allow_private_network. */
  dispatcher?: Dispatcher;
}

export const DELIVERY_TIMEOUT_MS = 30_000;

class AddressRefused extends Error {
  readonly code = 'EDGE_SSRF_REFUSED';
}

/**
 * An undici agent whose connector dials only addresses a drain may use: public
 * ones, and private-use ones with allow_private_network; link-local, metadata
 * and reserved never (origins' rules with ssrf_protection on).
 */
export function guardedDispatcher(allowPrivateNetwork: boolean, timeoutMs = DELIVERY_TIMEOUT_MS): Agent {
  const base = buildConnector({ timeout: Math.min(timeoutMs, 10_000), keepAlive: true, noDelay: true } as buildConnector.BuildOptions);
  const connect: buildConnector.connector = (opts, cb) => {
    const host = opts.hostname.startsWith('[') ? opts.hostname.slice(1, -1) : opts.hostname;
    const resolve = isIP(host) ? Promise.resolve([host]) : lookup(host, { all: true, verbatim: true }).then((rs) => rs.map((r) => r.address));
    resolve.then((addresses) => {
      const allowed = addresses.find((a) => originAddressAllowed(a, allowPrivateNetwork, true));
      if (allowed === undefined) {
        cb(new AddressRefused(`${host} resolves only to addresses logs may not be sent to (${addresses.join(', ')})`), null);
        return;
      }
      base({ ...opts, hostname: allowed, servername: isIP(host) ? undefined : (opts.servername ?? host) }, cb);
    }, (err: unknown) => cb(err as Error, null));
  };
  return new Agent({ connect, connections: 4, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
}

export interface HttpAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** Most of an answer's body kept (error messages show its start; Elasticsearch's bulk answer is read whole). */
const MAX_ANSWER_CHARS = 16 * 1024 * 1024;

/**
 * One request with a deadline. Network failures and timeouts are retryable
 * DeliveryErrors; `secrets` are scrubbed from every message.
 */
export async function sendRequest(
  ctx: { dispatcher: Dispatcher; timeoutMs: number; secrets: readonly string[] },
  url: string, init: { method: 'POST' | 'PUT'; headers: Record<string, string>; body: string | Buffer }, signal?: AbortSignal,
): Promise<HttpAnswer> {
  const deadline = AbortSignal.timeout(ctx.timeoutMs);
  const both = signal ? AbortSignal.any([signal, deadline]) : deadline;
  try {
    const res = await request(url, {
      dispatcher: ctx.dispatcher, method: init.method, headers: init.headers, body: init.body, signal: both,
      headersTimeout: ctx.timeoutMs, bodyTimeout: ctx.timeoutMs,
    });
    let text = '';
    for await (const chunk of res.body) {
      if (text.length < MAX_ANSWER_CHARS) text += (chunk as Buffer).toString('utf8');
    }
    return { status: res.statusCode, headers: res.headers, text };
  } catch (err) {
    const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
    if (e.code === 'EDGE_SSRF_REFUSED' || e.cause?.code === 'EDGE_SSRF_REFUSED') throw new DeliveryError(scrub(e.cause?.message ?? e.message ?? 'refused', ctx.secrets), false);
    const what = e.name === 'TimeoutError' || (e.name === 'AbortError' && deadline.aborted) || /TIMEOUT/.test(e.code ?? '')
      ? `no answer within ${ctx.timeoutMs} ms`
      : `${e.code ?? e.name ?? 'error'}: ${e.cause?.message ?? e.message ?? ''}`;
    throw new DeliveryError(scrub(`${new URL(url).host}: ${what}`, ctx.secrets), true);
  }
}

/** Statuses that refuse the batch as such (it would fail the same way again); other failures may pass (5xx, 429, refused credentials, a missing bucket). */
const BATCH_REFUSED = new Set([400, 413, 415, 422]);

/** A non-2xx answer as a DeliveryError, retryable unless it refuses the batch itself. */
export function statusError(destination: string, answer: HttpAnswer, secrets: readonly string[]): DeliveryError {
  const retryable = !BATCH_REFUSED.has(answer.status);
  const snippet = answer.text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim().slice(0, 200);
  return new DeliveryError(scrub(`${destination} answered ${answer.status}${snippet ? `: ${snippet}` : ''}`, secrets), retryable);
}

/** Text with every secret (and its base64 form) replaced by ***. */
export function scrub(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) {
    if (s.length < 4) continue;
    out = out.split(s).join('***');
    const b64 = Buffer.from(s).toString('base64');
    out = out.split(b64).join('***');
  }
  return out;
}

export const str = (config: Record<string, unknown>, key: string): string | undefined => (typeof config[key] === 'string' ? config[key] as string : undefined);
