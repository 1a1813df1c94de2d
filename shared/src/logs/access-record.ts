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

/** Renders one record as one line of the format (no newline): a JSON object for json and ndjson, a W3C entry. */
export type LineRenderer = (record: AccessRecord) => string;

/** The line renderer of a drain's fields and format (fields empty: all of them). */
export function lineRenderer(format: LogFormat, fields: readonly string[]): LineRenderer {
  const chosen = (fields.length ? fields : LOG_FIELDS).filter((f): f is LogField => (LOG_FIELDS as readonly string[]).includes(f));
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

/** The W3C `#Fields:` directive's value for a drain's fields. */
export function w3cFields(fields: readonly string[]): string {
  return (fields.length ? fields : LOG_FIELDS).filter((f): f is LogField => (LOG_FIELDS as readonly string[]).includes(f)).map((f) => W3C_NAMES[f]).join(' ');
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
