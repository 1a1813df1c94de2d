// What a log drain's destination is to the code that ships to it (the agent's
// drains and the control plane's connectivity test use the same clients,
// issue 24 items 2 and 3): a batch of rendered lines goes out in one request
// (or one object), and a failure says whether trying again may help. Every
// request goes through a dispatcher whose connector checks the address it
// dials with the origins' SSRF rules (shared/src/match/cidr.ts), so a name
// that resolves to a refused address later (DNS rebinding) is never dialled,
// and every wait is bounded. Error messages never carry a credential.
import { lookup } from 'node:dns/promises';
import { STATUS_CODES } from 'node:http';
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
    if (e.code === 'EDGE_SSRF_REFUSED' || e.cause?.code === 'EDGE_SSRF_REFUSED') throw new DeliveryError(safeText(e.cause?.message ?? e.message ?? 'refused', ctx.secrets), false);
    const what = e.name === 'TimeoutError' || (e.name === 'AbortError' && deadline.aborted) || /TIMEOUT/.test(e.code ?? '')
      ? `no answer within ${ctx.timeoutMs} ms`
      : `${e.code ?? e.name ?? 'error'}: ${e.cause?.message ?? e.message ?? ''}`;
    throw new DeliveryError(safeText(`${new URL(url).host}: ${what}`, ctx.secrets), true);
  }
}

/** Statuses that refuse the batch as such (it would fail the same way again); other failures may pass (5xx, 429, refused credentials, a missing bucket). */
const BATCH_REFUSED = new Set([400, 413, 415, 422]);

/**
 * A non-2xx answer as a DeliveryError, retryable unless it refuses the batch itself. The text is the status, its
 * standard reason phrase and the answer's error code when it names one (answerCode), never the answer's body: a
 * receiver may echo what it was sent (credentials included) in any encoding, and the text is shown to viewers.
 */
export function statusError(destination: string, answer: HttpAnswer, secrets: readonly string[]): DeliveryError {
  const retryable = !BATCH_REFUSED.has(answer.status);
  const code = answerCode(answer.text);
  return new DeliveryError(safeText(`${destination} answered ${answer.status}${STATUS_CODES[answer.status] ? ` ${STATUS_CODES[answer.status]}` : ''}${code ? ` (${code})` : ''}`, secrets), retryable);
}

/** What an error code looks like: an identifier (mapper_parsing_exception, NoSuchBucket, invalid_grant, PERMISSION_DENIED). */
const ERROR_CODE = /^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/;

/**
 * The error code a structured answer names: Elasticsearch's error.type, S3's <Code>, Cloud Storage's
 * error.errors[0].reason or error.status, OAuth's error (RFC 6749 §5.2), a string in errors[0]. Only an
 * identifier, never free text (a message may echo the request); null when there is none.
 */
export function answerCode(text: string): string | null {
  let code: unknown = /<Code>([^<]{1,64})<\/Code>/.exec(text)?.[1];
  if (code === undefined && /^\s*\{/.test(text)) {
    try {
      const body = JSON.parse(text) as { error?: string | { type?: unknown; status?: unknown; errors?: { reason?: unknown }[] }; errors?: unknown[] };
      const error = body.error;
      code = typeof error === 'string' ? error : error?.type ?? error?.errors?.[0]?.reason ?? error?.status ?? body.errors?.[0];
    } catch { /* not JSON: no code */ }
  }
  return errorCode(code);
}

/** The value when it is an error code (an identifier), otherwise null. */
export function errorCode(value: unknown): string | null {
  return typeof value === 'string' && ERROR_CODE.test(value) ? value : null;
}

/** An error text for people: control characters out, every secret scrubbed (scrub), and only then cut to `max` characters. */
export function safeText(text: string, secrets: readonly string[], max = 500): string {
  const scrubbed = scrub(text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim(), secrets);
  return scrubbed.length <= max ? scrubbed : `${scrubbed.slice(0, max - 1)}…`;
}

const regexEscape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/**
 * A pattern matching a text however a receiver may have written it back: each character as itself, percent-encoded
 * (its UTF-8 bytes, %25 repeated for encodings of encodings) or JSON-escaped (\uXXXX, \" \\ \/, escapes of
 * escapes), a space also as +. The whole is matched case-insensitively (the caller's flag), which also covers
 * upper-cased echoes and either case of hex digits.
 */
function encodedForms(text: string): string {
  let out = '';
  for (const ch of text) {
    const forms = [regexEscape(ch)];
    forms.push([...Buffer.from(ch, 'utf8')].map((b) => `%(?:25)*${hex2(b)}`).join(''));
    let units = '';
    for (let i = 0; i < ch.length; i++) units += `\\\\+u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`;
    forms.push(units);
    if (ch === '"' || ch === '\\' || ch === '/') forms.push(`\\\\+${regexEscape(ch)}`);
    if (ch === ' ') forms.push('\\+');
    out += `(?:${forms.join('|')})`;
  }
  return out;
}

/**
 * The base64 forms of a secret wherever it sits in a longer base64 text (standard and URL-safe alphabets): for
 * each of the three alignments, the characters that depend on the secret's bytes alone, so a secret inside a
 * whole request echoed as base64 is found as well as base64("user:password") of a Basic header.
 */
function base64Cores(secret: string): string[] {
  const bytes = Buffer.from(secret, 'utf8');
  const cores: string[] = [];
  for (let pad = 0; pad < 3; pad++) {
    const encoded = Buffer.concat([Buffer.alloc(pad), bytes]).toString('base64');
    const core = encoded.slice(Math.ceil((8 * pad) / 6), Math.floor((8 * (pad + bytes.length)) / 6));
    if (core.length >= 4) cores.push(core, core.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return [...new Set(cores)];
}

/** Secrets shorter than this are not scrubbed (they would blank ordinary words); credentials are longer. */
const MIN_SCRUBBED = 4;

/**
 * Text with every secret replaced by ***: as itself, percent-encoded, JSON-escaped and base64 (each alignment,
 * both alphabets, and those encoded again), in any letter case. Scrub before cutting a text (safeText): a secret
 * cut in two is no longer found.
 */
export function scrub(text: string, secrets: readonly string[]): string {
  const pattern = scrubPattern(secrets);
  return pattern === null ? text : text.replace(pattern, '***');
}

/** The pattern of a list of secrets, kept while the list holds the same secrets (a client's list is made once). */
const patterns = new WeakMap<readonly string[], { key: string; pattern: RegExp | null }>();

function scrubPattern(secrets: readonly string[]): RegExp | null {
  const key = secrets.join('\n');
  const known = patterns.get(secrets);
  if (known?.key === key) return known.pattern;
  const forms = [...new Set(secrets)].filter((s) => s.length >= MIN_SCRUBBED).flatMap((s) => [s, ...base64Cores(s)]);
  // Longest first, so a secret that contains another is replaced whole.
  const pattern = forms.length === 0 ? null : new RegExp(forms.sort((a, b) => b.length - a.length).map(encodedForms).join('|'), 'gi');
  patterns.set(secrets, { key, pattern });
  return pattern;
}

export const str = (config: Record<string, unknown>, key: string): string | undefined => (typeof config[key] === 'string' ? config[key] as string : undefined);
