// Redirects answered by a real agent process (--config-file) without asking the
// origin: tls_config.http_to_https_redirect sends plain-HTTP viewers to the
// same URL on https (HTTPS_PUBLIC_PORT 443, as behind a port mapping: the
// Location names no port; tls-sni.test.ts follows one to the agent's own HTTPS
// port; a trusted proxy's X-Forwarded-Proto: https passes through); a
// route's path redirect fills $1 from match_path and keeps the query.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { startAgentProcess, startOrigin, viewerRequests } from './helpers.ts';

const origin = await startOrigin((req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'no-store' });
  res.end(`origin ${req.method} ${req.url}`);
});
const dir = mkdtempSync(join(tmpdir(), 'edge-redirects-'));
const endpoint = (id: string, hostname: string, extra: Record<string, unknown>) => ({
  id, hostname, default_origin_id: `${id}-o`,
  origins: [{ id: `${id}-o`, scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 }],
  ...extra,
});
const configFile = join(dir, 'snapshot.json');
writeFileSync(configFile, JSON.stringify({
  version: 1,
  endpoints: [
    endpoint('tls', 'secure.test', { tls_config: { http_to_https_redirect: true } }),
    endpoint('paths', 'paths.test', {
      routes: [{
        id: 'legacy', origin_id: 'paths-o', match: { paths: ['/old/*', '/account/*'] },
        redirect_rules: [
          { type: 'path', status_code: 302, match_path: '/old/*/video-*.mp4', redirect_to: '/media/$1/$2.mp4' },
          { type: 'http_to_https', status_code: 308, match_path: '/account/*' },
        ],
      }],
    }),
  ],
}));
const agent = await startAgentProcess({ CONFIG_FILE: configFile, DATA_DIR: join(dir, 'data'), TRUST_PROXY_HEADER: 'x-forwarded-for', TRUSTED_PROXY_CIDRS: '127.0.0.1/32', HTTPS_PUBLIC_PORT: '443' });
t.teardown(async () => {
  agent.child.kill('SIGKILL');
  await origin.close();
  rmSync(dir, { recursive: true, force: true });
});

async function send(host: string, path: string, method = 'GET', headers: Record<string, string> = {}) {
  const res = await request(`http://127.0.0.1:${agent.port}${path}`, { method: method as 'GET', headers: { host, ...headers }, body: method === 'POST' ? 'x' : undefined });
  return { status: res.statusCode, location: res.headers.location, body: await res.body.text() };
}

t.test('http_to_https_redirect: the same URL on https, 301 for GET and HEAD, 308 for other methods; nothing reaches the origin', async (t) => {
  t.same(await send('secure.test', '/a/b?x=1&y=2'), { status: 301, location: 'https://secure.test/a/b?x=1&y=2', body: '' });
  t.equal((await send('secure.test', '/a', 'HEAD')).status, 301);
  t.same(await send('secure.test', '/upload', 'POST'), { status: 308, location: 'https://secure.test/upload', body: '' });
  t.equal(viewerRequests(origin).length, 0);
});

t.test('behind a trusted proxy that terminated TLS (X-Forwarded-Proto: https) the request is served', async (t) => {
  t.same(await send('secure.test', '/a', 'GET', { 'x-forwarded-proto': 'https' }), { status: 200, location: undefined, body: 'origin GET /a' });
});

t.test('a path redirect fills $1 and $2 from match_path\'s wildcards and keeps the query', async (t) => {
  t.same(await send('paths.test', '/old/2019/video-intro.mp4?t=30'), { status: 302, location: '/media/2019/intro.mp4?t=30', body: '' });
  t.same(await send('paths.test', '/old/2019/poster.jpg'), { status: 200, location: undefined, body: 'origin GET /old/2019/poster.jpg' }, 'no rule matches: served');
  t.same(await send('paths.test', '/account/settings'), { status: 308, location: 'https://paths.test/account/settings', body: '' });
  t.equal((await send('paths.test', '/new/x')).status, 200, 'another route: no redirect');
});
