// The access record of one answer (shared/src/logs/access-record.ts), made by
// the exit only when some drain receives the endpoint's records. Header
// fields are read from the raw header list (a cache hit never materialises
// req.headers); the endpoint's signing parameters are taken out of the
// recorded query (a refused signed URL keeps them in the exchange), and no
// cookie or Authorization value is ever read.
import { randomUUID } from 'node:crypto';
import type { AccessRecord } from '../../../shared/src/logs/access-record.ts';
import type { RecordNeeds } from '../logs/drains.ts';
import type { Exchange } from './exchange.ts';

/** The first value of a request header field (lower-case name), from the raw list. */
export function rawHeader(raw: readonly string[], name: string): string | null {
  for (let i = 0; i < raw.length; i += 2) {
    const n = raw[i]!;
    if (n.length === name.length && n.toLowerCase() === name) return raw[i + 1]!;
  }
  return null;
}

/** The query without the endpoint's signing parameters (tokens must never reach a log). */
function recordedQuery(ex: Exchange): string {
  const query = ex.query;
  const keys = ex.endpoint?.snapshot.signing_keys;
  if (query === '' || keys === undefined || keys.length === 0) return query;
  const names = new Set(keys.map((k) => k.token_param));
  return query.split('&').filter((pair) => {
    const eq = pair.indexOf('=');
    let name = eq === -1 ? pair : pair.slice(0, eq);
    try {
      name = decodeURIComponent(name.replace(/\+/g, ' '));
    } catch { /* kept as written */ }
    return !names.has(name);
  }).join('&');
}

/** clientIp: the viewer as the request policies resolve it (the trusted proxy's header when the peer is one), canonical. */
export function accessRecord(ex: Exchange, clientIp: string, status: number, cacheStatus: string, bytes: number, ms: number, nodeName: string, country: string | null, needs: RecordNeeds = { requestId: true, headers: true }): AccessRecord {
  const req = ex.req;
  const raw = req.rawHeaders;
  const headers = needs.headers;
  return {
    timestamp: Date.now(),
    request_id: needs.requestId ? randomUUID() : '',
    client_ip: clientIp,
    method: ex.method,
    scheme: (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
    host: ex.authority || ex.host,
    path: ex.path,
    query: recordedQuery(ex),
    protocol: req.httpVersionMajor === 1 && req.httpVersionMinor === 1 ? 'HTTP/1.1' : `HTTP/${req.httpVersion}`,
    status,
    bytes_sent: bytes,
    cache_status: cacheStatus,
    duration_ms: ms,
    origin_duration_ms: ex.originMs,
    endpoint_id: ex.endpoint!.id,
    route_id: ex.route?.id ?? null,
    cache_rule_id: ex.rule?.id ?? null,
    origin_id: ex.route?.origin.id ?? null,
    user_agent: headers ? rawHeader(raw, 'user-agent') : null,
    referer: headers ? rawHeader(raw, 'referer') : null,
    country,
    tls_version: (req.socket as { getProtocol?: () => string | null }).getProtocol?.() ?? null,
    denied_by: ex.denial?.policy ?? null,
    denial_reason: ex.denial?.reason ?? null,
    edge_node: nodeName,
    shield: ex.shieldHop !== null ? `from ${ex.shieldHop}` : ex.viaShield !== null ? `via ${ex.viaShield}` : null,
  };
}
