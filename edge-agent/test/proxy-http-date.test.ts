// Issue 25, item 1: one strict HTTP-date parser (RFC 9110 §5.6.7) for Expires,
// Date, Last-Modified, If-Modified-Since and Retry-After. An Expires that is not
// an IMF-fixdate, RFC 850 or asctime date means already expired (RFC 9111 §5.3).
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

const WEEKDAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const two = (n: number) => String(n).padStart(2, '0');
const imf = (ms: number) => new Date(ms).toUTCString();
const rfc850 = (ms: number) => {
  const d = new Date(ms);
  return `${WEEKDAYS[d.getUTCDay()]}, ${two(d.getUTCDate())}-${MONTHS[d.getUTCMonth()]}-${two(d.getUTCFullYear() % 100)} ${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} GMT`;
};
const asctime = (ms: number) => {
  const d = new Date(ms);
  const day = d.getUTCDate();
  return `${WEEKDAYS[d.getUTCDay()].slice(0, 3)} ${MONTHS[d.getUTCMonth()]} ${day < 10 ? ' ' + day : day} ${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} ${d.getUTCFullYear()}`;
};

t.test('RFC 9111 §5.3: an Expires that is not an HTTP-date makes the response stale at once; the three forms are dates', async (t) => {
  const expiresByPath = new Map<string, string>();
  const origin = await startOrigin((req, res) => {
    // No validator: a response stale on arrival is not stored at all, so a second request is a MISS.
    res.writeHead(200, { 'content-type': 'text/plain', expires: expiresByPath.get(req.url!)! });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const inAnHour = Date.now() + 3_600_000;
  const valid = imf(inAnHour);
  const invalid: Record<string, string> = {
    'UTC instead of GMT': valid.replace('GMT', 'UTC'),
    'a missing comma': valid.replace(',', ''),
    'dashes in an IMF-fixdate': valid.replace(/ (\w{3}) (\d{4}) /, '-$1-$2 '),
    'a one-digit hour': valid.replace(/ (\d{2}):/, (_m, h: string) => ` ${Number(h) % 10}:`),
    'doubled spaces': valid.replace(' ', '  '),
    'another weekday': valid.replace(/^\w{3}/, (d) => (d === 'Mon' ? 'Tue' : 'Mon')),
    'ISO 8601': new Date(inAnHour).toISOString(),
  };
  let i = 0;
  for (const [what, value] of Object.entries(invalid)) {
    const path = `/bad-${i++}`;
    expiresByPath.set(path, value);
    await edge.get(path);
    const again = await edge.get(path);
    t.equal(again.headers['x-cache-status'], 'MISS', `${what} (${value}): stale at once, not served from cache`);
    t.equal(origin.count(path), 2, `${what}: the origin was asked again`);
  }
  for (const [what, value] of Object.entries({ 'IMF-fixdate': valid, 'RFC 850': rfc850(inAnHour), asctime: asctime(inAnHour) })) {
    const path = `/good-${i++}`;
    expiresByPath.set(path, value);
    await edge.get(path);
    const again = await edge.get(path);
    t.equal(again.headers['x-cache-status'], 'HIT', `${what} (${value}) is a date: fresh for an hour`);
    t.equal(origin.count(path), 1);
  }
});

t.test('RFC 9110 §5.6.7: an RFC 850 year 50 is 2050 (not 1950), and one more than 50 years ahead is in the past', async (t) => {
  const expiresByPath = new Map<string, string>([
    ['/y50', 'Saturday, 01-Jan-50 00:00:00 GMT'], // 2050
    ['/y99', 'Friday, 01-Jan-99 00:00:00 GMT'], // 1999: 2099 is more than 50 years ahead
  ]);
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', expires: expiresByPath.get(req.url!)! });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/y50');
  t.equal((await edge.get('/y50')).headers['x-cache-status'], 'HIT', 'expires in 2050: fresh');
  await edge.get('/y99');
  t.equal((await edge.get('/y99')).headers['x-cache-status'], 'MISS', 'expired in 1999');
});

t.test('RFC 9110 §13.1.3: an If-Modified-Since that is not an HTTP-date is ignored (a 200, not a 304)', async (t) => {
  const lastModified = imf(Date.now() - 86_400_000);
  const origin = await startOrigin((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=300', 'last-modified': lastModified });
    res.end('doc');
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/doc');
  const now = Date.now();
  t.equal((await edge.get('/doc', { 'if-modified-since': imf(now) })).status, 304, 'an IMF-fixdate after Last-Modified');
  t.equal((await edge.get('/doc', { 'if-modified-since': rfc850(now) })).status, 304, 'an RFC 850 date');
  t.equal((await edge.get('/doc', { 'if-modified-since': asctime(now) })).status, 304, 'an asctime date');
  const bad = await edge.get('/doc', { 'if-modified-since': imf(now).replace('GMT', 'UTC') });
  t.equal(bad.status, 200, 'UTC instead of GMT: ignored');
  t.equal(bad.body, 'doc');
});

t.test('RFC 9110 §5.6.7: a Last-Modified that is not an HTTP-date gives no heuristic freshness; an invalid Date is replaced', async (t) => {
  const old = Date.now() - 100 * 86_400_000;
  const origin = await startOrigin((req, res) => {
    res.sendDate = false;
    const lm = req.url === '/valid' ? imf(old) : imf(old).replace('GMT', 'UTC');
    res.writeHead(200, { 'content-type': 'text/plain', 'last-modified': lm, date: 'yesterday' });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const first = await edge.get('/valid');
  t.match(first.headers.date, /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/, 'the invalid Date was replaced by the time received');
  t.equal((await edge.get('/valid')).headers['x-cache-status'], 'HIT', 'valid Last-Modified 100 days back: heuristically fresh');
  await edge.get('/invalid');
  t.not((await edge.get('/invalid')).headers['x-cache-status'], 'HIT', 'invalid Last-Modified: no heuristic freshness');
  t.equal(origin.count('/invalid'), 2);
});

t.test('RFC 9110 §10.2.3: a retry honours Retry-After up to the longest retry wait; longer, the origin\'s answer goes to the viewer', async (t) => {
  const retryAfterByPath = new Map<string, string>([
    ['/long', '120'],
    ['/long-date', imf(Date.now() + 3_600_000)],
    ['/invalid', imf(Date.now() + 3_600_000).replace('GMT', 'UTC')],
    ['/now', '0'],
  ]);
  const origin = await startOrigin((req, res) => {
    res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': retryAfterByPath.get(req.url!)! });
    res.end('busy');
  });
  const edge = await startAgent(snapshotFor(origin.port, { origin: { max_retries: 2, retry_on: ['5xx'] } }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const path of ['/long', '/long-date']) {
    const r = await edge.get(path);
    t.equal(r.status, 503);
    t.equal(r.headers['retry-after'], retryAfterByPath.get(path), `${path}: the viewer gets the origin's Retry-After`);
    t.equal(origin.count(path), 1, `${path}: no retry when the origin asks for a longer wait`);
  }
  await edge.get('/invalid');
  t.equal(origin.count('/invalid'), 3, 'a Retry-After that is not a date is ignored: retried per retry_on');
  await edge.get('/now');
  t.equal(origin.count('/now'), 3, 'Retry-After 0: retried');
});
