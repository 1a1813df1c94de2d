// Issue 25, item 8: a POST's answer with explicit freshness and a
// Content-Location equal to its own URL may be stored and reused for a later
// GET of that URL (RFC 9110 §9.3.3; the complement of RFC 9111 §4.4's
// invalidation). Without explicit freshness, or naming another URL, it is not.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('RFC 9110 §9.3.3: a POST answer with explicit freshness and Content-Location = its URL answers later GETs', async (t) => {
  // By request target: the Content-Location the origin sends, whether it states freshness, and whether the answer is kept.
  const cases: [string, string, string, boolean, boolean][] = [
    ['relative Content-Location', '/doc', '/doc', true, true],
    ['relative Content-Location with the query', '/search?q=a', '/search?q=a', true, true],
    ['absolute Content-Location on the same host', '/abs', 'http://cdn.test/abs', true, true],
    ['dot segments that normalise to the path', '/dots', '/x/../dots', true, true],
    ['another path', '/other', '/elsewhere', true, false],
    ['the same path with another query', '/q?a=1', '/q?a=2', true, false],
    ['another host', '/host', 'http://evil.example/host', true, false],
    ['no explicit freshness (a validator only)', '/stale', '/stale', false, false],
    ['no Content-Location', '/none', '', true, false],
  ];
  const byTarget = new Map(cases.map(([, url, cl, fresh]) => [url, { cl, fresh }]));
  const origin = await startOrigin((req, res) => {
    const { cl, fresh } = byTarget.get(req.url!)!;
    const headers: Record<string, string> = { 'content-type': 'text/plain' };
    if (cl !== '') headers['content-location'] = cl;
    if (fresh) headers['cache-control'] = 'max-age=300';
    else headers.etag = '"e"';
    res.writeHead(200, headers);
    res.end(`${req.method} ${req.url}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const [what, url, , , kept] of cases) {
    const posted = await edge.get(url, { 'content-type': 'text/plain' }, 'POST', 'x=1');
    t.equal(posted.status, 200, `${what}: the POST is answered`);
    t.equal(posted.body, `POST ${url}`, `${what}: with the origin's answer`);
    const got = await edge.get(url);
    if (kept) {
      t.equal(got.headers['x-cache-status'], 'HIT', `${what}: the GET is answered from the POST's answer`);
      t.equal(got.body, `POST ${url}`);
      t.equal(origin.requests.filter((r) => r.url === url && r.method === 'GET').length, 0, `${what}: no GET reached the origin`);
    } else {
      t.not(got.headers['x-cache-status'], 'HIT', `${what}: not kept`);
      t.equal(got.body, `GET ${url}`);
    }
  }
});

t.test('RFC 9111 §4.4: a later POST to the URL still invalidates the kept answer first, then its own answer replaces it', async (t) => {
  let n = 0;
  const origin = await startOrigin((req, res) => {
    n++;
    const headers: Record<string, string> = { 'content-type': 'text/plain', 'cache-control': 'max-age=300' };
    if (req.method === 'POST' && n > 1) headers['content-location'] = '/counter';
    res.writeHead(200, headers);
    res.end(`${req.method} #${n}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/counter');
  t.equal((await edge.get('/counter')).body, 'GET #1', 'cached GET');
  await edge.get('/counter', {}, 'POST', 'a');
  t.equal((await edge.get('/counter')).body, 'POST #2', 'the POST answer replaced the stored GET');
});
