// Response shaping on a real agent process (--config-file) in front of a real
// origin: a CORS preflight answered at the edge, override false keeping the
// origin's header, compressed and uncompressed variants stored separately
// (the agent's /healthz counts them) and a range request on a
// compressible object, a custom error page kept for its TTL, a removed
// request header that never reaches the origin; and a snapshot with a policy
// the edge could not send refused at start with one line.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { request } from 'undici';
import { sleep, startAgentProcess, startOrigin, viewerRequests } from './helpers.ts';

const HOST = 'shaped.test';
const page = '<!doctype html><title>Streaming</title>' + '<p>Every frame, on time.</p>'.repeat(100);
let errorPageVersion = 1;
const origin = await startOrigin((req, res) => {
  if (req.url === '/errors/404.html') return res.writeHead(200, { 'content-type': 'text/html' }).end(`<h1>Lost (v${errorPageVersion})</h1>`);
  if (req.url?.startsWith('/missing')) return res.writeHead(404, { 'content-type': 'text/plain' }).end('origin 404');
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'max-age=300', etag: '"p1"', 'x-frame-options': 'SAMEORIGIN' }).end(page);
});
const dir = mkdtempSync(join(tmpdir(), 'edge-shaping-'));
t.teardown(async () => {
  await origin.close();
  rmSync(dir, { recursive: true, force: true });
});

const policy = {
  id: 'site',
  cors: { enabled: true, allow_origins: ['https://app.example'], allow_methods: ['GET', 'PUT'], allow_headers: ['X-Token'], max_age_seconds: 600 },
  security_headers: { x_frame_options: { enabled: true, value: 'DENY', override: false }, x_content_type_options: { enabled: true } },
  remove_request_headers: ['X-Secret'],
};
const snapshot = (policies: unknown[]) => ({
  version: 4,
  endpoints: [{
    id: 'shaped', hostname: HOST, default_origin_id: 'o', response_headers_policy_id: 'site',
    compression: { enabled: true, algorithms: ['br', 'gzip'], min_size_bytes: 256 },
    custom_error_pages: [{ error_code: 404, response_page_path: '/errors/404.html', ttl_seconds: 1 }],
    origins: [{ id: 'o', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
  }],
  response_headers_policies: policies,
});
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify(snapshot([policy])));
const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data') });
t.teardown(() => { agent.child.kill('SIGKILL'); });
const metricsPort = Number(/"metrics_port":(\d+)/.exec(agent.logs.find((l) => l.includes('"metrics_port"'))!)![1]);
const cacheObjects = async () => ((await (await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).json()) as { cache_objects: number }).cache_objects;

async function get(path: string, headers: Record<string, string> = {}, method = 'GET') {
  const res = await request(`http://127.0.0.1:${agent.port}${path}`, { method: method as 'GET', headers: { host: HOST, ...headers } });
  const body = Buffer.from(await res.body.arrayBuffer());
  const h: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) h[k] = Array.isArray(v) ? v.join(', ') : String(v);
  return { status: res.statusCode, headers: h, body };
}

t.test('a CORS preflight is answered by the edge; the origin never sees it', async (t) => {
  const before = viewerRequests(origin).length;
  const r = await get('/api/item', { origin: 'https://app.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'X-Token' }, 'OPTIONS');
  t.equal(r.status, 204);
  t.equal(r.headers['access-control-allow-origin'], 'https://app.example');
  t.equal(r.headers['access-control-allow-methods'], 'GET, PUT');
  t.equal(r.headers['access-control-allow-headers'], 'x-token');
  t.equal(r.headers['access-control-max-age'], '600');
  t.equal((await get('/api/item', { origin: 'https://other.example', 'access-control-request-method': 'PUT' }, 'OPTIONS')).status, 403);
  t.equal(viewerRequests(origin).length, before);
});

t.test('override false keeps the origin\'s header; the policy\'s fills what is missing', async (t) => {
  const r = await get('/page');
  t.equal(r.headers['x-frame-options'], 'SAMEORIGIN');
  t.equal(r.headers['x-content-type-options'], 'nosniff');
  const missing = await get('/missing/x');
  t.equal(missing.headers['x-frame-options'], 'DENY', 'the origin\'s 404 had none: filled');
});

t.test('compressed and uncompressed variants are stored separately; a range is served from the identity', async (t) => {
  const objects = await cacheObjects();
  const fetched = origin.count('/doc');
  const gz = await get('/doc', { 'accept-encoding': 'gzip' });
  const br = await get('/doc', { 'accept-encoding': 'br;q=1, gzip;q=0.5' });
  const plain = await get('/doc');
  t.equal(gz.headers['content-encoding'], 'gzip');
  t.equal(gunzipSync(gz.body).toString(), page);
  t.equal(br.headers['content-encoding'], 'br');
  t.equal(brotliDecompressSync(br.body).toString(), page);
  t.equal(plain.headers['content-encoding'], undefined);
  t.equal(plain.body.toString(), page);
  t.same([gz.headers.etag, br.headers.etag, plain.headers.etag], ['"p1-gzip"', '"p1-br"', '"p1"']);
  t.equal(origin.count('/doc') - fetched, 1, 'one origin fetch for the three');
  t.equal(await cacheObjects(), objects + 3, 'three stored objects');
  for (const ae of ['gzip', 'br', '']) {
    const again = await get('/doc', ae ? { 'accept-encoding': ae } : {});
    t.equal(again.headers['x-cache-status'], 'HIT', `${ae || 'identity'} is a hit`);
  }
  t.equal(await cacheObjects(), objects + 3, 'hits store nothing more');
  const range = await get('/doc', { 'accept-encoding': 'gzip, br', range: 'bytes=0-14' });
  t.equal(range.status, 206);
  t.equal(range.headers['content-encoding'], undefined);
  t.equal(range.headers['content-range'], `bytes 0-14/${Buffer.byteLength(page)}`);
  t.equal(range.body.toString(), page.slice(0, 15));
});

t.test('a custom error page is served and kept for its TTL', async (t) => {
  const first = await get('/missing/a');
  t.equal(first.status, 404, 'response_code null keeps the status');
  t.equal(first.body.toString(), '<h1>Lost (v1)</h1>');
  t.equal(first.headers['content-type'], 'text/html');
  errorPageVersion = 2;
  t.equal((await get('/missing/b')).body.toString(), '<h1>Lost (v1)</h1>', 'within the TTL: the kept page');
  t.equal(origin.count('/errors/404.html'), 1);
  await sleep(1100); // ttl_seconds is 1: the page has to age past it
  t.equal((await get('/missing/c')).body.toString(), '<h1>Lost (v2)</h1>', 'after the TTL: fetched again');
  t.equal(origin.count('/errors/404.html'), 2);
});

t.test('a removed request header never reaches the origin', async (t) => {
  const before = viewerRequests(origin).length;
  await get('/private', { 'x-secret': 'do-not-forward', 'x-kept': 'yes' });
  const sent = viewerRequests(origin).slice(before);
  t.equal(sent.length, 1);
  t.equal(sent[0].headers['x-secret'], undefined);
  t.equal(sent[0].headers['x-kept'], 'yes');
});

t.test('a snapshot file with a policy the edge could not send stops the agent with one line naming it', async (t) => {
  const bad = join(dir, 'bad.json');
  writeFileSync(bad, JSON.stringify(snapshot([{ ...policy, cors: { enabled: true, allow_credentials: true } }])));
  const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
  const r = spawnSync(process.execPath, [main], { env: { ...process.env, CONFIG_FILE: bad, DATA_DIR: join(dir, 'bad-data'), HTTP_PORT: '0', METRICS_PORT: '0', HOST: '127.0.0.1', METRICS_HOST: '127.0.0.1' }, encoding: 'utf8', timeout: 20_000 });
  t.equal(r.status, 1);
  t.match(r.stderr + r.stdout, /response headers policy site: cors\.allow_credentials/);
});
