// Custom error pages compiled: the table by error code (paths normalised, the
// query kept for the fetch), the refusal of pages the edge could not fetch,
// and the head of a page's answer.
import t from 'tap';
import { endpointSnapshot } from '../../../shared/src/config/snapshot.ts';
import { compileErrorPages, pageHead } from './error-pages.ts';

const endpoint = (pages: unknown[]) => endpointSnapshot.parse({ id: 'ep', hostname: 'h.test', default_origin_id: 'o', origins: [{ id: 'o', host: 'example.com' }], custom_error_pages: pages });

t.test('pages by error code: normalised path, the query kept for the fetch, TTL in ms', async (t) => {
  t.equal(compileErrorPages(endpoint([])), null);
  const table = compileErrorPages(endpoint([
    { error_code: 404, response_page_path: '/errors/./%7Enot-found.html', response_code: 200, ttl_seconds: 30 },
    { error_code: 503, response_page_path: '/errors/down.html?lang=en' },
  ]))!;
  t.same(table.get(404), { errorCode: 404, path: '/errors/~not-found.html', target: '/errors/~not-found.html', responseCode: 200, ttlMs: 30_000 });
  t.same(table.get(503), { errorCode: 503, path: '/errors/down.html', target: '/errors/down.html?lang=en', responseCode: null, ttlMs: 10_000 });
  t.equal(table.get(500), undefined);
});

t.test('pages the edge could not fetch refuse the configuration, naming the field', async (t) => {
  t.throws(() => compileErrorPages(endpoint([{ error_code: 404, response_page_path: 'errors/404.html' }])), /custom_error_pages\[0\]\.response_page_path/);
  t.throws(() => compileErrorPages(endpoint([{ error_code: 404, response_page_path: '/a%2fb.html' }])), /response_page_path/, 'an encoded slash');
  t.throws(() => compileErrorPages(endpoint([{ error_code: 404, response_page_path: '//other.example/x' }])), /response_page_path/, 'not another host');
  t.throws(() => compileErrorPages(endpoint([{ error_code: 404, response_page_path: '/x' }, { error_code: 404, response_page_path: '/y' }])), /custom_error_pages\[1\]\.error_code/);
});

t.test('the page\'s answer keeps the fields about the exchange and takes the page\'s type and length', async (t) => {
  t.same(pageHead([
    'content-type', 'text/plain', 'content-length', '9', 'etag', '"x"', 'last-modified', 'Mon, 01 Jan 2024 00:00:00 GMT', 'cache-control', 'no-store',
    'content-encoding', 'gzip', 'accept-ranges', 'bytes', 'cache-status', 'edge; fwd=miss',
  ], 'text/html', 120), ['cache-control', 'no-store', 'cache-status', 'edge; fwd=miss', 'content-type', 'text/html', 'content-length', '120']);
  t.same(pageHead([], undefined, 0), ['content-length', '0'], 'a page without a type');
});
