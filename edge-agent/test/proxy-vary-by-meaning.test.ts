// Issue 25, item 4: selecting a stored variant (RFC 9111 §4.1) compares
// Accept-Language and Accept-Encoding by what they mean: case, order of equal
// preferences, whitespace and the spelling of q-values do not split the cache;
// a different preference does.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('RFC 9111 §4.1: Accept-Language and Accept-Encoding variants are selected by meaning, not byte for byte', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=300', vary: 'Accept-Language, Accept-Encoding' });
    res.end(`lang=${req.headers['accept-language']} enc=${req.headers['accept-encoding']}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const first = await edge.get('/page', { 'accept-language': 'en-US, fr;q=0.5', 'accept-encoding': 'gzip, br' });
  t.equal(first.headers['x-cache-status'], 'MISS');
  for (const [lang, enc] of [
    ['fr;q=0.5,en-US', 'br,gzip'], // order
    ['EN-us , FR;Q=0.50', 'GZIP ,BR'], // case, whitespace, q spelling
    ['en-US;q=1.0, fr;q=0.500', 'gzip;q=1, br;q=1.000'], // explicit q=1
  ]) {
    const r = await edge.get('/page', { 'accept-language': lang, 'accept-encoding': enc });
    t.equal(r.headers['x-cache-status'], 'HIT', `${lang} / ${enc}: the same variant`);
    t.equal(r.body, 'lang=en-US, fr;q=0.5 enc=gzip, br');
  }
  t.equal(origin.count('/page'), 1);
  for (const [lang, enc, what] of [
    ['fr, en-US;q=0.5', 'gzip, br', 'another language preferred'],
    ['en-US, fr;q=0.4', 'gzip, br', 'another q-value'],
    ['en-US, fr;q=0.5', 'gzip;q=0, br', 'gzip refused'],
    ['en-US', 'gzip, br', 'fewer languages'],
  ]) {
    const r = await edge.get('/page', { 'accept-language': lang, 'accept-encoding': enc });
    t.equal(r.headers['x-cache-status'], 'MISS', `${what}: another variant`);
  }
  t.equal(origin.count('/page'), 5);
});
