import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('Vary selects the stored variant; Vary: * never matches', async (t) => {
  const origin = await startOrigin((req, res) => {
    if (req.url === '/star') {
      res.writeHead(200, { 'cache-control': 'max-age=60', vary: '*' });
      res.end('star');
      return;
    }
    res.writeHead(200, { 'cache-control': 'max-age=60', vary: 'Accept-Language' });
    res.end(`lang=${req.headers['accept-language'] ?? 'none'}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  t.equal((await edge.get('/v', { 'accept-language': 'en' })).body, 'lang=en');
  t.equal((await edge.get('/v', { 'accept-language': 'fr' })).body, 'lang=fr');
  const en = await edge.get('/v', { 'accept-language': 'en' });
  t.equal(en.body, 'lang=en');
  t.equal(en.headers['x-cache-status'], 'HIT');
  const fr = await edge.get('/v', { 'accept-language': 'fr' });
  t.equal(fr.body, 'lang=fr');
  t.equal(fr.headers['x-cache-status'], 'HIT');
  t.equal(origin.count('/v'), 2);
  await edge.get('/star');
  const s = await edge.get('/star');
  t.equal(s.headers['x-cache-status'], 'MISS', 'Vary: * is never served from cache');
  t.equal(origin.count('/star'), 2);
});
