// Custom error pages with a real origin: an origin's 404 and the edge's own
// 502 answered with the page from the endpoint's origin, with response_code
// or the original status; the page fetched once per ttl_seconds (and again
// after); a page that cannot be fetched (an error status, over 1 MiB) leaves
// the original answer; a purge of the page's path, tag, or everything drops
// the kept page; the header policy applies to the page.
import t from 'tap';
import { HOST, startAgent, startOrigin, testClock } from './helpers.ts';

let pageVersion = 1;
let pageBroken = false;
const origin = await startOrigin((req, res) => {
  const url = req.url ?? '/';
  if (url === '/errors/404.html') {
    if (pageBroken) return res.writeHead(500).end('page broken');
    return res.writeHead(200, { 'content-type': 'text/html', 'cache-tag': 'error-pages' }).end(`<h1>Not here (page v${pageVersion})</h1>`);
  }
  if (url === '/errors/502.html') return res.writeHead(200, { 'content-type': 'text/html' }).end('<h1>Origin trouble</h1>');
  if (url === '/errors/gone.html') return res.writeHead(404).end('no page either');
  if (url === '/errors/huge.html') return res.writeHead(200, { 'content-type': 'text/html' }).end('x'.repeat(1024 * 1024 + 1));
  if (url.startsWith('/unavailable')) return res.writeHead(503, { 'content-type': 'text/plain' }).end('origin 503');
  if (url.startsWith('/missing')) return res.writeHead(404, { 'content-type': 'text/plain', 'cache-control': 'max-age=60', etag: '"m"' }).end('origin 404');
  if (url.startsWith('/teapot')) return res.writeHead(418, { 'content-type': 'text/plain' }).end('origin 418');
  res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
});
t.teardown(() => origin.close());

// The agent's clock is moved past a page's TTL instead of sleeping through it.
const clock = testClock();
const edge = await startAgent({
  version: 1,
  endpoints: [{
    id: 'ep1', hostname: HOST, default_origin_id: 'o1', response_headers_policy_id: 'p',
    custom_error_pages: [
      { error_code: 404, response_page_path: '/errors/404.html', response_code: 200, ttl_seconds: 3 },
      { error_code: 502, response_page_path: '/errors/502.html', ttl_seconds: 300 },
      { error_code: 418, response_page_path: '/errors/gone.html', ttl_seconds: 300 },
      { error_code: 503, response_page_path: '/errors/huge.html', ttl_seconds: 300 },
    ],
    origins: [
      { id: 'o1', scheme: 'http', host: '127.0.0.1', port: origin.port, allow_private_network: true, max_retries: 0 },
      { id: 'dead', scheme: 'http', host: '127.0.0.1', port: 1, allow_private_network: true, max_retries: 0 },
    ],
    routes: [{ id: 'dead', origin_id: 'dead', match: { paths: ['/dead/*'] } }],
  }],
  response_headers_policies: [{ id: 'p', custom_response_headers: [{ name: 'X-Policy', value: 'on' }] }],
}, { clock: clock.now });
t.teardown(() => edge.close());

t.test('an origin 404 is answered with the page and response_code; the page is kept for its TTL and fetched again after', async (t) => {
  const first = await edge.get('/missing/a');
  t.equal(first.status, 200, 'response_code');
  t.equal(first.body, '<h1>Not here (page v1)</h1>');
  t.equal(first.headers['content-type'], 'text/html');
  t.equal(first.headers['content-length'], String(first.body.length));
  t.equal(first.headers.etag, undefined, 'the original\'s validators go with its body');
  t.equal(first.headers['x-policy'], 'on', 'the header policy applies to the page\'s answer');
  const cachedError = await edge.get('/missing/a');
  t.equal(cachedError.headers['x-cache-status'], 'HIT', 'the 404 itself is cached as the origin said');
  t.equal(cachedError.body, '<h1>Not here (page v1)</h1>');
  await edge.get('/missing/b');
  t.equal(origin.count('/errors/404.html'), 1, 'one page fetch within the TTL');
  pageVersion = 2;
  clock.advance(3100); // past the page's ttl_seconds (3): this is what is tested
  const later = await edge.get('/missing/c');
  t.equal(later.body, '<h1>Not here (page v2)</h1>', 'fetched again after the TTL');
  t.equal(origin.count('/errors/404.html'), 2);
});

t.test('the edge\'s own 502 gets its page, with the original status when response_code is null', async (t) => {
  const r = await edge.get('/dead/x');
  t.equal(r.status, 502);
  t.equal(r.body, '<h1>Origin trouble</h1>');
  t.equal(r.headers['cache-control'], 'no-store', 'the refusal\'s own fields stay');
  const head = await edge.get('/dead/y', {}, 'HEAD');
  t.equal(head.status, 502);
  t.equal(head.headers['content-length'], String('<h1>Origin trouble</h1>'.length));
  t.equal(head.body, '');
});

t.test('a page that cannot be fetched leaves the original answer', async (t) => {
  const r = await edge.get('/teapot');
  t.equal(r.status, 418);
  t.equal(r.body, 'origin 418');
  await edge.get('/teapot');
  t.equal(origin.count('/errors/gone.html'), 1, 'a failed page is not asked for again at once');
  const huge = await edge.get('/unavailable');
  t.equal(huge.status, 503);
  t.equal(huge.body, 'origin 503', 'a page over 1 MiB is not used');
});

t.test('purges reach the kept page: all, and its tag', async (t) => {
  const fetches = origin.count('/errors/404.html');
  pageVersion = 3;
  edge.agent.applyPurge({ sequence: 0, purge_id: 'p1', endpoint_id: 'ep1', type: 'all' });
  t.equal((await edge.get('/missing/e')).body, '<h1>Not here (page v3)</h1>', 'fetched again after "purge all"');
  t.equal(origin.count('/errors/404.html'), fetches + 1);
  pageVersion = 4;
  edge.agent.applyPurge({ sequence: 0, purge_id: 'p2', endpoint_id: 'ep1', type: 'tag', tags: ['error-pages'] });
  t.equal((await edge.get('/missing/f')).body, '<h1>Not here (page v4)</h1>', 'a purge of the page\'s Cache-Tag');
  pageVersion = 5;
  edge.agent.applyPurge({ sequence: 0, purge_id: 'p3', endpoint_id: 'ep1', type: 'path', paths: ['/errors/404.html'] });
  t.equal((await edge.get('/missing/g')).body, '<h1>Not here (page v5)</h1>', 'a purge of the page\'s path');
});

t.test('a failed refresh after the TTL falls back to the original answer', async (t) => {
  clock.advance(3100); // past the 404 page's TTL (3 s)
  pageBroken = true;
  const broken = await edge.get('/missing/h');
  t.equal(broken.status, 404);
  t.equal(broken.body, 'origin 404');
  t.equal(broken.headers['x-policy'], 'on');
});
