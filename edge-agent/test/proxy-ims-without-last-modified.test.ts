// Issue 25, item 5: If-Modified-Since against a stored response without
// Last-Modified is compared with its Date (RFC 9110 §13.1.3, RFC 9111 §4.3.2),
// or with the time it was received when the origin sent no Date either.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('RFC 9110 §13.1.3: If-Modified-Since is compared with Date when the stored response has no Last-Modified', async (t) => {
  const date = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000);
  const origin = await startOrigin((req, res) => {
    if (req.url === '/no-date') res.sendDate = false;
    const headers: Record<string, string> = { 'content-type': 'text/plain', 'cache-control': 'max-age=300' };
    if (req.url === '/dated') headers.date = date.toUTCString();
    res.writeHead(200, headers);
    res.end('body');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/dated');
  const same = await edge.get('/dated', { 'if-modified-since': date.toUTCString() });
  t.equal(same.status, 304, 'modified no later than the Date: 304 from cache');
  t.equal(same.headers['x-cache-status'], 'HIT');
  t.equal(same.body, '');
  t.equal((await edge.get('/dated', { 'if-modified-since': new Date(date.getTime() + 3_600_000).toUTCString() })).status, 304);
  const earlier = await edge.get('/dated', { 'if-modified-since': new Date(date.getTime() - 1000).toUTCString() });
  t.equal(earlier.status, 200, 'a time before the Date: the full response');
  t.equal(earlier.body, 'body');
  t.equal((await edge.get('/dated', { 'if-modified-since': date.toUTCString().replace('GMT', 'UTC') })).status, 200, 'not an HTTP-date: ignored');
  t.equal(origin.count('/dated'), 1);

  await edge.get('/no-date');
  t.equal((await edge.get('/no-date', { 'if-modified-since': new Date(Date.now() + 60_000).toUTCString() })).status, 304, 'no Date: compared with the time received');
  t.equal((await edge.get('/no-date', { 'if-modified-since': new Date(Date.now() - 3_600_000).toUTCString() })).status, 200);
});
