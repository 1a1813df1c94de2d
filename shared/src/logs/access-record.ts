// The access record the edge makes for every answer of an endpoint (issue 24
// item 1), and how a log drain renders it: the fields a drain may choose (in
// their canonical order) and the three log formats. Shared by the agent
// (edge-agent/src/logs, which ships records) and the control plane (the
// drain's fields at the API, and the connectivity test's synthetic record).
// Records carry no cookie, no Authorization value and no signing token (the
// exit takes the endpoint's token parameters out of the recorded query).

/** One answer of an endpoint, as the exit saw it. Times are milliseconds. */
export interface AccessRecord {
  /** When the answer was finished (ms since the epoch). */
  timestamp: number;
  /** Unique per answer (Elasticsearch documents and receivers deduplicate by it). */
  request_id: string;
  client_ip: string;
  method: string;
  scheme: 'http' | 'https';
  host: string;
  path: string;
  /** The query as the viewer sent it, without the endpoint's signing parameters. */
  query: string;
  protocol: string;
  status: number;
  bytes_sent: number;
  cache_status: string;
  duration_ms: number;
  /** Time to the origin's response head, when the origin was asked. */
  origin_duration_ms: number | null;
  endpoint_id: string;
  route_id: string | null;
  cache_rule_id: string | null;
  origin_id: string | null;
  user_agent: string | null;
  referer: string | null;
  country: string | null;
  tls_version: string | null;
  /** The request policy that refused the request (ip_rule, geo, signed_url...), and why. */
  denied_by: string | null;
  denial_reason: string | null;
  edge_node: string;
  /**
   * Origin shield (issue 23 item 5): `via <node id>` when this node fetched the answer from that shield node,
   * `from <node id>` when it answered that node's shield hop as the shield; null otherwise.
   */
  shield: string | null;
}

/** The fields a drain may ship, in their canonical order (its `fields` default). */
export const LOG_FIELDS = [
  'timestamp', 'request_id', 'client_ip', 'method', 'host', 'url', 'path', 'query', 'protocol', 'status', 'bytes_sent', 'cache_status',
  'duration_ms', 'origin_duration_ms', 'endpoint_id', 'route_id', 'cache_rule_id', 'origin_id', 'user_agent', 'referer', 'country',
  'tls_version', 'denied_by', 'denial_reason', 'edge_node', 'shield',
] as const;
export type LogField = (typeof LOG_FIELDS)[number];

export const LOG_FORMATS = ['json', 'ndjson', 'w3c_extended'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The W3C Extended Log File Format identifier of each field (`timestamp` is written as `date time`). */
const W3C_NAMES: Record<LogField, string> = {
  timestamp: 'date time', request_id: 'x-request-id', client_ip: 'c-ip', method: 'cs-method', host: 'cs(Host)', url: 'cs-uri', path: 'cs-uri-stem',
  query: 'cs-uri-query', protocol: 'cs-version', status: 'sc-status', bytes_sent: 'sc-bytes', cache_status: 'x-cache-status', duration_ms: 'time-taken',
  origin_duration_ms: 'x-origin-time-taken', endpoint_id: 'x-endpoint-id', route_id: 'x-route-id', cache_rule_id: 'x-cache-rule-id',
  origin_id: 'x-origin-id', user_agent: 'cs(User-Agent)', referer: 'cs(Referer)', country: 'x-country', tls_version: 'x-tls-version',
  denied_by: 'x-denied-by', denial_reason: 'x-denial-reason', edge_node: 's-computername', shield: 'x-edge-shield',
};

export function recordUrl(r: AccessRecord): string {
  return r.query === '' ? `${r.scheme}://${r.host}${r.path}` : `${r.scheme}://${r.host}${r.path}?${r.query}`;
}

// ---- JSON --------------------------------------------------------------------

const NEEDS_ESCAPE = /["\\\u0000-\u001f\u2028\u2029\ud800-\udfff]/;

/** A JSON string literal (the common case, plain text, without JSON.stringify). */
function jsonString(s: string | null): string {
  if (s === null) return 'null';
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : `"${s}"`;
}

let isoMs = -1;
let isoText = '';
/** ISO 8601 of a millisecond, remembered (answers of one millisecond share it). */
export function isoTime(ms: number): string {
  if (ms !== isoMs) {
    isoMs = ms;
    isoText = new Date(ms).toISOString();
  }
  return isoText;
}

const num = (n: number | null) => (n === null ? 'null' : String(Math.round(n * 1000) / 1000));

const JSON_VALUES: Record<LogField, (r: AccessRecord) => string> = {
  timestamp: (r) => `"${isoTime(r.timestamp)}"`,
  request_id: (r) => jsonString(r.request_id),
  client_ip: (r) => jsonString(r.client_ip),
  method: (r) => jsonString(r.method),
  host: (r) => jsonString(r.host),
  url: (r) => jsonString(recordUrl(r)),
  path: (r) => jsonString(r.path),
  query: (r) => jsonString(r.query),
  protocol: (r) => jsonString(r.protocol),
  status: (r) => String(r.status),
  bytes_sent: (r) => String(r.bytes_sent),
  cache_status: (r) => jsonString(r.cache_status),
  duration_ms: (r) => num(r.duration_ms),
  origin_duration_ms: (r) => num(r.origin_duration_ms),
  endpoint_id: (r) => jsonString(r.endpoint_id),
  route_id: (r) => jsonString(r.route_id),
  cache_rule_id: (r) => jsonString(r.cache_rule_id),
  origin_id: (r) => jsonString(r.origin_id),
  user_agent: (r) => jsonString(r.user_agent),
  referer: (r) => jsonString(r.referer),
  country: (r) => jsonString(r.country),
  tls_version: (r) => jsonString(r.tls_version),
  denied_by: (r) => jsonString(r.denied_by),
  denial_reason: (r) => jsonString(r.denial_reason),
  edge_node: (r) => jsonString(r.edge_node),
  shield: (r) => jsonString(r.shield),
};

/**
 * Fields with few distinct values (methods, cache statuses, ids, the node's name): each renderer remembers
 * the last value's literal, so a repeated value is not checked for escapes again.
 */
function repeating(get: (r: AccessRecord) => string | null): () => (r: AccessRecord) => string {
  return () => {
    let last: string | null | undefined;
    let text = '';
    return (r) => {
      const s = get(r);
      if (s !== last) {
        last = s;
        text = jsonString(s);
      }
      return text;
    };
  };
}

const JSON_REPEATING: Partial<Record<LogField, () => (r: AccessRecord) => string>> = {
  method: repeating((r) => r.method),
  host: repeating((r) => r.host),
  protocol: repeating((r) => r.protocol),
  cache_status: repeating((r) => r.cache_status),
  endpoint_id: repeating((r) => r.endpoint_id),
  route_id: repeating((r) => r.route_id),
  cache_rule_id: repeating((r) => r.cache_rule_id),
  origin_id: repeating((r) => r.origin_id),
  country: repeating((r) => r.country),
  tls_version: repeating((r) => r.tls_version),
  denied_by: repeating((r) => r.denied_by),
  denial_reason: repeating((r) => r.denial_reason),
  edge_node: repeating((r) => r.edge_node),
  shield: repeating((r) => r.shield),
};

// ---- W3C extended ------------------------------------------------------------

const W3C_UNSAFE = /[\u0000-\u0020"%\u007f-\uffff]/;
const W3C_UNSAFE_ALL = /[\u0000-\u0020"%\u007f-\uffff]/gu;

/** A W3C field value: `-` for none; spaces, quotes, controls, `%` and non-ASCII percent-encoded (UTF-8), as CloudFront does. */
function w3cValue(s: string | null): string {
  if (s === null || s === '') return '-';
  if (!W3C_UNSAFE.test(s)) return s;
  return s.replace(W3C_UNSAFE_ALL, (c) => {
    try {
      return encodeURIComponent(c).replace(/'/g, '%27');
    } catch {
      return '%EF%BF%BD'; // a lone surrogate
    }
  });
}

const w3cNum = (n: number | null) => (n === null ? '-' : String(Math.round(n * 1000) / 1000));

const W3C_VALUES: Record<LogField, (r: AccessRecord) => string> = {
  timestamp: (r) => {
    const iso = isoTime(r.timestamp);
    return `${iso.slice(0, 10)} ${iso.slice(11, 23)}`;
  },
  request_id: (r) => w3cValue(r.request_id),
  client_ip: (r) => w3cValue(r.client_ip),
  method: (r) => w3cValue(r.method),
  host: (r) => w3cValue(r.host),
  url: (r) => w3cValue(recordUrl(r)),
  path: (r) => w3cValue(r.path),
  query: (r) => w3cValue(r.query),
  protocol: (r) => w3cValue(r.protocol),
  status: (r) => String(r.status),
  bytes_sent: (r) => String(r.bytes_sent),
  cache_status: (r) => w3cValue(r.cache_status),
  duration_ms: (r) => w3cNum(r.duration_ms),
  origin_duration_ms: (r) => w3cNum(r.origin_duration_ms),
  endpoint_id: (r) => w3cValue(r.endpoint_id),
  route_id: (r) => w3cValue(r.route_id),
  cache_rule_id: (r) => w3cValue(r.cache_rule_id),
  origin_id: (r) => w3cValue(r.origin_id),
  user_agent: (r) => w3cValue(r.user_agent),
  referer: (r) => w3cValue(r.referer),
  country: (r) => w3cValue(r.country),
  tls_version: (r) => w3cValue(r.tls_version),
  denied_by: (r) => w3cValue(r.denied_by),
  denial_reason: (r) => w3cValue(r.denial_reason),
  edge_node: (r) => w3cValue(r.edge_node),
  shield: (r) => w3cValue(r.shield),
};

// ---- lines and batches -------------------------------------------------------

/** The known fields of a drain's list, in its order (empty: all of them). */
function chosenFields(fields: readonly string[]): LogField[] {
  return (fields.length ? fields : LOG_FIELDS).filter((f): f is LogField => (LOG_FIELDS as readonly string[]).includes(f));
}

/** Renders one record as one line of the format (no newline): a JSON object for json and ndjson, a W3C entry. */
export type LineRenderer = (record: AccessRecord) => string;

/** The line renderer of a drain's fields and format (fields empty: all of them). */
export function lineRenderer(format: LogFormat, fields: readonly string[]): LineRenderer {
  const chosen = chosenFields(fields);
  if (format === 'w3c_extended') {
    const values = chosen.map((f) => W3C_VALUES[f]);
    return (r) => {
      let s = values[0]!(r);
      for (let i = 1; i < values.length; i++) s += ' ' + values[i]!(r);
      return s;
    };
  }
  const keys = chosen.map((f, i) => `${i === 0 ? '{' : ','}"${f}":`);
  const values = chosen.map((f) => JSON_REPEATING[f]?.() ?? JSON_VALUES[f]);
  return (r) => {
    let s = '';
    for (let i = 0; i < values.length; i++) s += keys[i] + values[i]!(r);
    return s + '}';
  };
}

// ---- lines written as bytes -----------------------------------------------------

/**
 * Writes one record's line (no newline) as UTF-8 into buf from pos, ending at most at end, and returns where it
 * ended, or -1 when it would not fit (buf from pos on is then scratch). The bytes are exactly those of the
 * LineRenderer's line: a drain writes each record straight into its chunk, with no string per line or value.
 */
export type LineWriter = (record: AccessRecord, buf: Buffer, pos: number, end: number) => number;

/** asciiRun's answer for a string that is not plain ASCII or needs escaping (it is then written as text). */
const NOT_PLAIN = -2;

/** Copies a string of printable ASCII without `"` or `\` (JSON writes it as it is): the end, -1 out of room, NOT_PLAIN otherwise. */
function asciiRun(s: string, buf: Buffer, pos: number, end: number): number {
  const n = s.length;
  if (pos + n > end) return -1;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return NOT_PLAIN;
    buf[pos + i] = c;
  }
  return pos + n;
}

/** Text as UTF-8 (any alphabet): the end, or -1 out of room. */
function textRun(s: string, buf: Buffer, pos: number, end: number): number {
  if (pos + s.length * 3 > end && pos + Buffer.byteLength(s) > end) return -1;
  return pos + buf.write(s, pos, 'utf8');
}

/** A value's text, copied when plain, else as UTF-8. */
function writeText(s: string, buf: Buffer, pos: number, end: number): number {
  const p = asciiRun(s, buf, pos, end);
  return p === NOT_PLAIN ? textRun(s, buf, pos, end) : p;
}

/** jsonString(s), written. */
function writeJsonString(s: string | null, buf: Buffer, pos: number, end: number): number {
  if (s === null) return asciiRun('null', buf, pos, end);
  if (pos + 2 > end) return -1;
  buf[pos] = 0x22;
  const p = asciiRun(s, buf, pos + 1, end - 1);
  if (p === NOT_PLAIN) return textRun(jsonString(s), buf, pos, end);
  if (p < 0) return -1;
  buf[p] = 0x22;
  return p + 1;
}

/** String(n), written (digits computed for the common case, a non-negative integer). */
function writeNumber(n: number, buf: Buffer, pos: number, end: number): number {
  if (!(n >= 0 && n <= 0x7fffffff && (n | 0) === n)) return asciiRun(String(n), buf, pos, end);
  let digits = 1;
  for (let x = n; x >= 10; x = (x / 10) | 0) digits++;
  if (pos + digits > end) return -1;
  let p = pos + digits;
  let x = n;
  do {
    buf[--p] = 0x30 + (x % 10);
    x = (x / 10) | 0;
  } while (x > 0);
  return pos + digits;
}

/** Writes one field of a JSON line, its key (`{"name":` first, `,"name":` after) included: the end, or -1 out of room. */
type FieldWriter = (r: AccessRecord, buf: Buffer, pos: number, end: number) => number;

/** Copies bytes: the end, or -1 out of room. */
function copyBytes(bytes: Uint8Array, buf: Buffer, pos: number, end: number): number {
  const n = bytes.length;
  if (pos + n > end) return -1;
  buf.set(bytes, pos);
  return pos + n;
}

/** The key's bytes, then the value. */
function keyed(key: string, value: FieldWriter): FieldWriter {
  const bytes = Buffer.from(key, 'latin1');
  return (r, buf, pos, end) => {
    const p = copyBytes(bytes, buf, pos, end);
    return p < 0 ? -1 : value(r, buf, p, end);
  };
}

/**
 * A field whose values repeat (the time within a millisecond, methods, statuses, ids, the node's name): the bytes
 * of the key and the last value's literal are kept, and copied while the value stays the same.
 */
function remembered<T>(key: string, get: (r: AccessRecord) => T, literal: (value: T) => string): FieldWriter {
  let known = false;
  let last: T | undefined;
  let bytes: Uint8Array = Buffer.alloc(0);
  return (r, buf, pos, end) => {
    const value = get(r);
    if (!known || value !== last) {
      known = true;
      last = value;
      bytes = Buffer.from(key + literal(value), 'utf8');
    }
    return copyBytes(bytes, buf, pos, end);
  };
}

const stringField = (get: (r: AccessRecord) => string | null) => (key: string): FieldWriter =>
  keyed(key, (r, buf, pos, end) => writeJsonString(get(r), buf, pos, end));
const repeatingField = (get: (r: AccessRecord) => string | null) => (key: string): FieldWriter => remembered(key, get, jsonString);
const numberField = (get: (r: AccessRecord) => number) => (key: string): FieldWriter =>
  keyed(key, (r, buf, pos, end) => writeNumber(get(r), buf, pos, end));
const timeField = (get: (r: AccessRecord) => number | null) => (key: string): FieldWriter =>
  keyed(key, (r, buf, pos, end) => asciiRun(num(get(r)), buf, pos, end));

/**
 * `"scheme://host/path?query"`: the key and `"scheme://host` kept as bytes while they stay the same (when plain),
 * the path and query copied; a piece that is not plain makes the whole URL text.
 */
function urlField(key: string): FieldWriter {
  let scheme = '';
  let host: string | null = null;
  let prefix: Uint8Array | null = null;
  return (r, buf, pos, end) => {
    if (r.host !== host || r.scheme !== scheme) {
      scheme = r.scheme;
      host = r.host;
      const text = `${key}"${scheme}://${host}`;
      prefix = /^[\x20-\x7e]*$/.test(text) && !/["\\]/.test(text.slice(key.length + 1)) ? Buffer.from(text, 'latin1') : null;
    }
    let p = prefix === null ? NOT_PLAIN : copyBytes(prefix, buf, pos, end - 1);
    if (p >= 0) p = asciiRun(r.path, buf, p, end - 1);
    if (p >= 0 && r.query !== '') {
      p = asciiRun('?', buf, p, end - 1);
      if (p >= 0) p = asciiRun(r.query, buf, p, end - 1);
    }
    if (p === NOT_PLAIN) return textRun(`${key}${jsonString(recordUrl(r))}`, buf, pos, end);
    if (p < 0) return -1;
    buf[p] = 0x22;
    return p + 1;
  };
}

const JSON_FIELDS: Record<LogField, (key: string) => FieldWriter> = {
  timestamp: (key) => remembered(key, (r) => r.timestamp, (ms) => `"${isoTime(ms)}"`),
  request_id: stringField((r) => r.request_id),
  client_ip: stringField((r) => r.client_ip),
  method: repeatingField((r) => r.method),
  host: repeatingField((r) => r.host),
  url: urlField,
  path: stringField((r) => r.path),
  query: stringField((r) => r.query),
  protocol: repeatingField((r) => r.protocol),
  status: (key) => remembered(key, (r) => r.status, String),
  bytes_sent: numberField((r) => r.bytes_sent),
  cache_status: repeatingField((r) => r.cache_status),
  duration_ms: timeField((r) => r.duration_ms),
  origin_duration_ms: timeField((r) => r.origin_duration_ms),
  endpoint_id: repeatingField((r) => r.endpoint_id),
  route_id: repeatingField((r) => r.route_id),
  cache_rule_id: repeatingField((r) => r.cache_rule_id),
  origin_id: repeatingField((r) => r.origin_id),
  user_agent: stringField((r) => r.user_agent),
  referer: stringField((r) => r.referer),
  country: repeatingField((r) => r.country),
  tls_version: repeatingField((r) => r.tls_version),
  denied_by: repeatingField((r) => r.denied_by),
  denial_reason: repeatingField((r) => r.denial_reason),
  edge_node: repeatingField((r) => r.edge_node),
  shield: repeatingField((r) => r.shield),
};

/** The line writer of a drain's fields and format (fields empty: all of them); null when none is chosen (the renderer's case). */
export function lineWriter(format: LogFormat, fields: readonly string[]): LineWriter | null {
  const chosen = chosenFields(fields);
  if (chosen.length === 0) return null;
  if (format === 'w3c_extended') {
    // W3C values are ASCII (w3cValue percent-encodes the rest): each is copied, space-separated.
    const values = chosen.map((f) => W3C_VALUES[f]);
    return (r, buf, pos, end) => {
      for (let i = 0; i < values.length; i++) {
        if (i > 0) {
          if (pos >= end) return -1;
          buf[pos++] = 0x20;
        }
        pos = writeText(values[i]!(r), buf, pos, end);
        if (pos < 0) return -1;
      }
      return pos;
    };
  }
  const writers = chosen.map((f, i) => JSON_FIELDS[f](`${i === 0 ? '{' : ','}"${f}":`));
  return (r, buf, pos, end) => {
    for (let i = 0; i < writers.length; i++) {
      pos = writers[i]!(r, buf, pos, end);
      if (pos < 0) return -1;
    }
    if (pos >= end) return -1;
    buf[pos] = 0x7d; // }
    return pos + 1;
  };
}

/** The W3C `#Fields:` directive's value for a drain's fields. */
export function w3cFields(fields: readonly string[]): string {
  return chosenFields(fields).map((f) => W3C_NAMES[f]).join(' ');
}

/**
 * A batch's bytes in the format: json, one JSON array of the records; ndjson,
 * one record per line; w3c_extended, a log file (the #Version, #Fields and
 * #Date directives, then one entry per line).
 */
export function frameBatch(format: LogFormat, fields: readonly string[], lines: readonly string[], now = Date.now()): string {
  if (format === 'json') return `[${lines.join(',')}]`;
  if (format === 'ndjson') return lines.length ? `${lines.join('\n')}\n` : '';
  const iso = new Date(now).toISOString();
  return `#Version: 1.0\n#Fields: ${w3cFields(fields)}\n#Date: ${iso.slice(0, 10)} ${iso.slice(11, 19)}\n${lines.length ? `${lines.join('\n')}\n` : ''}`;
}

/**
 * frameBatch over bytes: the body holds the lines, each followed by a newline
 * (destination.ts Batch). ndjson is the body itself; json turns the newlines
 * into commas within brackets; w3c_extended puts the directives before it.
 */
export function frameBody(format: LogFormat, fields: readonly string[], body: Buffer, now = Date.now()): Buffer {
  if (format === 'ndjson') return body;
  if (format === 'json') {
    if (body.length === 0) return Buffer.from('[]');
    const out = Buffer.allocUnsafe(body.length + 1);
    out[0] = 0x5b; // [
    body.copy(out, 1);
    for (let i = out.indexOf(10, 1); i !== -1; i = out.indexOf(10, i + 1)) out[i] = 0x2c; // ,
    out[out.length - 1] = 0x5d; // ] in place of the last separator
    return out;
  }
  return Buffer.concat([Buffer.from(frameBatch(format, fields, [], now)), body]);
}

/** The media type of a batch in the format. */
export function formatMediaType(format: LogFormat): string {
  return format === 'json' ? 'application/json' : format === 'ndjson' ? 'application/x-ndjson' : 'text/plain; charset=utf-8';
}

/** A record that no viewer made, for the connectivity test (clearly marked as synthetic in the path and user agent). */
export function syntheticRecord(edgeNode: string, now = Date.now()): AccessRecord {
  return {
    timestamp: now, request_id: crypto.randomUUID(), client_ip: '192.0.2.1', method: 'GET', scheme: 'https', host: 'log-drain-test.invalid',
    path: '/log-drain-test', query: '', protocol: 'HTTP/1.1', status: 200, bytes_sent: 0, cache_status: 'HIT', duration_ms: 0,
    origin_duration_ms: null, endpoint_id: '00000000-0000-0000-0000-000000000000', route_id: null, cache_rule_id: null, origin_id: null,
    user_agent: 'log-drain-test/1', referer: null, country: null, tls_version: null, denied_by: null, denial_reason: null, edge_node: edgeNode,
    shield: null,
  };
}
