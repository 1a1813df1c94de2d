// One table of cases run over HTTP/1.1 and HTTP/2 (issue 34 item 2): the
// request path serves HTTP/2 through its own small request/response pair on
// Node's core stream API, and every behaviour of the HTTP/1.1 path must hold
// there too. Each case is sent once per protocol over the agent's HTTPS
// listener (undici, h2 by ALPN or not) and must give the same status, the
// same fields that matter and the same body on both, and the access records
// (from an HTTP log drain) and traffic counters of the two passes must be
// equal but for the protocol. Cases: miss then hit, HEAD, 304, ranges (single,
// multiple, unsatisfiable), a response headers policy with CORS and a
// preflight, a route redirect, an IP rule's denial, signed URLs, a compressed
// variant, and a viewer that leaves mid-body (a cacheable fill goes on and is
// stored; a fill nobody else wants is cancelled at the origin).
import t, { type Test } from 'tap';
import { Agent, request } from 'undici';
import type { ServerResponse } from 'node:http';
import { makeCa, makeLeaf } from '../../test/support/certificates.ts';
import { eventually } from '../../test/support/eventually.ts';
import { bodyText, startReceiver } from '../../test/support/log-receivers.ts';
import { signPath } from '../../shared/src/signing/signed-url.ts';
import { DefaultCertificate } from '../src/tls/certificates.ts';
import { HOST, startAgent, startOrigin } from './helpers.ts';

const DENY = 'deny.cdn.test';
const SIGNED = 'sign.cdn.test';
const SECRET = 'both-protocols-signing-secret-0123456789abcdef';
const ca = await makeCa('Both Protocols CA');
const leaf = await makeLeaf(ca, [HOST, DENY, SIGNED]);
const text = 'compressible text '.repeat(200);

/** Origin requests held mid-body (/partial/*: head and 10 bytes sent), and the URLs whose answer was cut under it. */
const held: { url: string; res: ServerResponse }[] = [];
const cancelled: string[] = [];
const origin = await startOrigin((req, res) => {
  const url = req.url!;
  res.on('close', () => { if (!res.writableFinished) cancelled.push(url); });
  if (url.includes('/partial/')) {
    const cacheControl = url.includes('nostore') ? 'no-store' : 'max-age=600';
    // An early hint first: a viewer that saw it knows the edge has the head too (parsed in the same read).
    res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': cacheControl, 'content-length': '20' });
    res.write('0123456789');
    held.push({ url, res });
    return;
  }
  if (url.includes('/text')) {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60' });
    res.end(text);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=60', etag: '"e1"', 'last-modified': 'Tue, 01 Dec 2026 10:00:00 GMT' });
  res.end(`origin ${url.split('?')[0]!.replace(/\/h[12]\//, '/hX/')} 0123456789abcdefghij`);
});
t.teardown(() => {
  for (const h of held) h.res.end('abcdefghij');
  return origin.close();
});
const receiver = await startReceiver(t);

const endpoint = (id: string, hostname: string, extra: Record<string, unknown> = {}) => ({
  id, hostname, default_origin_id: `${id}-o`, http_version: 'http2',
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0, timeout_ms: 30_000 }],
  ...extra,
});
const FIELDS = ['method', 'host', 'path', 'query', 'protocol', 'status', 'bytes_sent', 'cache_status', 'endpoint_id', 'route_id', 'origin_id', 'client_ip', 'denied_by', 'denial_reason', 'tls_version'];
const edge = await startAgent({
  version: 1,
  response_headers_policies: [{
    id: 'pol', name: 'both',
    cors: { enabled: true, allow_origins: ['https://app.example'], allow_methods: ['GET', 'PUT'], allow_headers: ['X-Token'], max_age_seconds: 600 },
    security_headers: { x_content_type_options: { enabled: true } },
    custom_response_headers: [{ name: 'x-both', value: 'yes', override: true }],
  }],
  endpoints: [
    endpoint('main', HOST, {
      response_headers_policy_id: 'pol',
      compression: { enabled: true, algorithms: ['gzip'], min_size_bytes: 100 },
      routes: [{
        id: 'legacy', origin_id: 'main-o', match: { paths: ['/h1/old/*', '/h2/old/*'] },
        redirect_rules: [{ type: 'path', status_code: 302, match_path: '/*/old/*', redirect_to: '/$1/new/$2' }],
      }],
    }),
    endpoint('deny', DENY, { ip_rules: [{ id: 'loopback', action: 'block', cidr: '127.0.0.0/8', priority: 1 }] }),
    endpoint('sign', SIGNED, { signing_keys: [{ id: 'k1', algorithm: 'HMAC-SHA256', secrets: [{ secret: SECRET, valid_until: null }] }] }),
  ],
  log_drains: [{ id: 'd1', destination_type: 'http', destination_config: { url: `${receiver.url}/in`, allow_private_network: true }, log_format: 'ndjson', fields: FIELDS }],
}, { logDrains: { flushIntervalMs: 20 } });
edge.agent.setDefaultCertificate(new DefaultCertificate({ certPem: leaf.certPem + ca.pem, keyPem: leaf.keyPem }));
const { port: httpsPort } = await edge.agent.listenHttps(0, '127.0.0.1');
t.teardown(() => edge.close());

interface Answer { status: number; headers: Record<string, string>; body: string }
interface Case {
  name: string;
  host?: string;
  /** The path under /h1 or /h2 (p: that prefix), so each protocol has its own cache entries. */
  path: (p: string) => string;
  method?: string;
  headers?: Record<string, string>;
  /** Requests sent first (a miss that fills the cache). */
  before?: boolean;
  /** Fields compared across protocols and checked by `expect`. */
  fields: string[];
  expect: (t: Test, a: Answer, p: string) => void;
}

const expires = Math.floor(Date.now() / 1000) + 3600;
const body = (name: string) => `origin /hX/${name} 0123456789abcdefghij`;
const cases: Case[] = [
  { name: 'a miss', path: (p) => `/${p}/a`, fields: ['x-cache-status', 'etag', 'x-both', 'x-content-type-options'], expect: (t, a) => {
    t.same([a.status, a.headers['x-cache-status'], a.body], [200, 'MISS', body('a')]);
    t.same([a.headers['x-both'], a.headers['x-content-type-options']], ['yes', 'nosniff'], 'the response headers policy');
  } },
  { name: 'then a hit', path: (p) => `/${p}/a`, fields: ['x-cache-status', 'accept-ranges', 'content-length'], expect: (t, a) => t.same([a.status, a.headers['x-cache-status'], a.body], [200, 'HIT', body('a')]) },
  { name: 'HEAD from cache', path: (p) => `/${p}/a`, method: 'HEAD', fields: ['x-cache-status', 'content-length'], expect: (t, a) => t.same([a.status, a.headers['x-cache-status'], a.body], [200, 'HIT', '']) },
  { name: '304 for a matching If-None-Match', path: (p) => `/${p}/a`, headers: { 'if-none-match': '"e1"' }, fields: ['etag', 'x-cache-status'], expect: (t, a) => t.same([a.status, a.body, a.headers.etag], [304, '', '"e1"']) },
  { name: '304 for If-Modified-Since', path: (p) => `/${p}/a`, headers: { 'if-modified-since': 'Wed, 02 Dec 2026 10:00:00 GMT' }, fields: ['last-modified'], expect: (t, a) => t.equal(a.status, 304) },
  { name: 'a single range', path: (p) => `/${p}/a`, headers: { range: 'bytes=7-10' }, fields: ['content-range', 'content-length'], expect: (t, a) => t.same([a.status, a.headers['content-range'], a.body], [206, `bytes 7-10/${body('a').length}`, '/hX/']) },
  { name: 'a suffix range', path: (p) => `/${p}/a`, headers: { range: 'bytes=-4' }, fields: ['content-range'], expect: (t, a) => t.same([a.status, a.body], [206, 'ghij']) },
  { name: 'multiple ranges: the whole object', path: (p) => `/${p}/a`, headers: { range: 'bytes=0-1,5-6' }, fields: ['content-range', 'content-type'], expect: (t, a) => t.ok(a.status === 200 || a.status === 206, `answered ${a.status}`) },
  { name: 'an unsatisfiable range', path: (p) => `/${p}/a`, headers: { range: 'bytes=9999-' }, fields: ['content-range'], expect: (t, a) => t.same([a.status, a.headers['content-range'], a.body], [416, `bytes */${body('a').length}`, '']) },
  { name: 'CORS: an allowed origin', path: (p) => `/${p}/a`, headers: { origin: 'https://app.example' }, fields: ['access-control-allow-origin', 'vary'], expect: (t, a) => t.equal(a.headers['access-control-allow-origin'], 'https://app.example') },
  { name: 'CORS: another origin gets no grant', path: (p) => `/${p}/a`, headers: { origin: 'https://evil.example' }, fields: ['access-control-allow-origin'], expect: (t, a) => t.equal(a.headers['access-control-allow-origin'], undefined) },
  { name: 'CORS: a preflight answered at the edge', path: (p) => `/${p}/a`, method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'PUT' }, fields: ['access-control-allow-methods', 'access-control-max-age'], expect: (t, a) => {
    t.ok(a.status === 200 || a.status === 204, `preflight ${a.status}`);
    t.match(a.headers['access-control-allow-methods'] ?? '', /PUT/);
  } },
  { name: 'a route redirect', path: (p) => `/${p}/old/x`, fields: ['location'], expect: (t, a, p) => t.same([a.status, a.headers.location], [302, `/${p}/new/x`]) },
  { name: 'an IP rule denies', host: DENY, path: (p) => `/${p}/d`, fields: [], expect: (t, a) => t.equal(a.status, 403) },
  { name: 'an unsigned URL is refused', host: SIGNED, path: (p) => `/${p}/s`, fields: [], expect: (t, a) => t.equal(a.status, 403) },
  { name: 'a signed URL is served', host: SIGNED, path: (p) => signPath({ path: `/${p}/s`, expires, secret: SECRET }), fields: ['x-cache-status'], expect: (t, a) => t.same([a.status, a.body], [200, body('s')]) },
  { name: 'a compressed variant', path: (p) => `/${p}/text`, headers: { 'accept-encoding': 'gzip' }, before: true, fields: ['content-encoding', 'vary', 'x-cache-status'], expect: (t, a) => t.same([a.status, a.headers['content-encoding'], a.headers['x-cache-status']], [200, 'gzip', 'HIT']) },
];

type Line = Record<string, unknown>;
const lines = (): Line[] => receiver.requests.flatMap((r) => bodyText(r).trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line));
const counters = () => JSON.stringify([...edge.agent.traffic.totals].map(([id, v]) => [id, Array.from(v.statusClasses)]).sort());
const seen: Record<string, { answers: Answer[]; records: Line[]; counted: string }> = {};

for (const protocol of ['HTTP/1.1', 'HTTP/2'] as const) {
  const p = protocol === 'HTTP/2' ? 'h2' : 'h1';
  const dispatcher = new Agent({ allowH2: protocol === 'HTTP/2', connect: { servername: HOST, ca: ca.pem } });
  t.teardown(() => dispatcher.close());
  const send = async (host: string, path: string, method = 'GET', headers: Record<string, string> = {}): Promise<Answer> => {
    const res = await request(`https://127.0.0.1:${httpsPort}${path}`, { dispatcher, method: method as 'GET', headers: { host, ...headers } });
    const raw = Buffer.from(await res.body.arrayBuffer());
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: res.statusCode, headers: h, body: h['content-encoding'] === 'gzip' ? `gzip ${raw.length}` : raw.toString() };
  };

  t.test(`${protocol}: the table of cases`, async (t) => {
    const before = counters();
    const answers: Answer[] = [];
    for (const c of cases) {
      const host = c.host ?? HOST;
      if (c.before) await send(host, c.path(p), c.method, c.headers);
      const a = await send(host, c.path(p), c.method, c.headers);
      c.expect(t, a, p);
      answers.push(a);
    }
    // The access records of this pass: one per request sent (the compressed case sends two).
    const sent = cases.length + cases.filter((c) => c.before).length;
    await eventually(() => lines().filter((l) => String(l.path).startsWith(`/${p}/`)).length === sent, `the ${sent} access records of ${protocol}`);
    const records = lines().filter((l) => String(l.path).startsWith(`/${p}/`));
    t.ok(records.every((l) => l.protocol === (protocol === 'HTTP/2' ? 'HTTP/2.0' : 'HTTP/1.1')), `records say ${protocol}`);
    seen[protocol] = { answers, records, counted: `${before} -> ${counters()}` };
  });
}

t.test('both protocols gave the same answers, access records and counters', async (t) => {
  const [h1, h2] = [seen['HTTP/1.1']!, seen['HTTP/2']!];
  for (const [i, c] of cases.entries()) {
    const pick = (a: Answer) => ({ status: a.status, body: a.body, ...Object.fromEntries(c.fields.map((f) => [f, a.headers[f]?.replace(/\/h[12]\//g, '/hX/')])) });
    t.same(pick(h2.answers[i]!), pick(h1.answers[i]!), c.name);
  }
  const norm = (l: Line) => ({ ...l, path: String(l.path).replace(/^\/h[12]\//, '/hX/'), protocol: undefined });
  const key = (l: Line) => `${l.host} ${l.path} ${l.method} ${l.status}`;
  const sorted = (ls: Line[]) => ls.map(norm).sort((a, b) => key(a).localeCompare(key(b)));
  t.same(sorted(h2.records), sorted(h1.records), 'access records equal field for field (but the protocol)');
  t.ok(h1.records.every((l) => l.client_ip === '127.0.0.1' && l.tls_version === 'TLSv1.3'), 'the viewer and the TLS version recorded');
  const denials = h1.records.filter((l) => l.denied_by !== null).map((l) => `${l.endpoint_id} ${l.status}`).sort();
  t.same(denials, ['deny 403', 'sign 403'], 'the IP rule\'s and the signed URL\'s denials recorded with their policy');
  const delta = (s: string) => {
    const [a, b] = s.split(' -> ').map((x) => new Map(JSON.parse(x) as [string, number[]][]));
    return [...b!].map(([id, v]) => [id, v.map((n, k) => n - (a!.get(id)?.[k] ?? 0))]);
  };
  t.same(delta(h2.counted), delta(h1.counted), 'the traffic counters moved alike (requests by endpoint and status class)');
});

for (const protocol of ['HTTP/1.1', 'HTTP/2'] as const) {
  const p = protocol === 'HTTP/2' ? 'h2' : 'h1';
  const dispatcher = new Agent({ allowH2: protocol === 'HTTP/2', connect: { servername: HOST, ca: ca.pem } });
  t.teardown(() => dispatcher.close());
  /**
   * Sends a GET and leaves (HTTP/1.1: the connection closed; HTTP/2: the stream reset): once the origin's early hint
   * arrived, so the edge has the origin's head (whenBody false), or once the answer's head and first body bytes
   * arrived (whenBody true: what arrived).
   */
  const leave = async (path: string, whenBody: boolean) => {
    const controller = new AbortController();
    let hinted: () => void = () => {};
    const hint = new Promise<void>((resolve) => (hinted = resolve));
    const answer = request(`https://127.0.0.1:${httpsPort}${path}`, { dispatcher, headers: { host: HOST }, signal: controller.signal, onInfo: () => hinted() });
    answer.catch(() => {});
    let seen = null;
    if (whenBody) {
      const res = await answer;
      res.body.on('error', () => {});
      seen = { status: res.statusCode, first: await new Promise<string>((resolve) => res.body.once('data', (c: Buffer) => resolve(c.toString()))) };
    } else await hint;
    controller.abort();
    return seen;
  };

  t.test(`${protocol}: a viewer who leaves: a cacheable fill goes on and is stored, a streamed answer nobody wants is cancelled mid-body`, async (t) => {
    // The cacheable object is kept for the cache: the viewer waits for it whole, and leaves while it arrives
    // (after the origin's head reached the edge: before that, a fill nobody waits for is rightly cancelled).
    await leave(`/${p}/partial/kept`, false);
    // One that cannot be stored is streamed through: the viewer leaves after its head and first bytes.
    const gone = await leave(`/${p}/partial/nostore`, true);
    t.same(gone, { status: 200, first: '0123456789' }, 'the head and the first bytes of the streamed answer arrived');
    await eventually(() => cancelled.includes(`/${p}/partial/nostore`), 'the no-store fill cancelled at the origin');
    t.notOk(cancelled.includes(`/${p}/partial/kept`), 'the cacheable fill goes on');
    for (const h of held.filter((x) => x.url === `/${p}/partial/kept`)) h.res.end('abcdefghij');
    await edge.agent.proxy.settled();
    const res = await request(`https://127.0.0.1:${httpsPort}/${p}/partial/kept`, { dispatcher, headers: { host: HOST } });
    t.same([res.headers['x-cache-status'], await res.body.text()], ['HIT', '0123456789abcdefghij'], 'stored whole although its viewer left');
    t.notOk(cancelled.includes(`/${p}/partial/kept`));
  });
}
