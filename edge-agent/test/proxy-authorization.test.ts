import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('responses to requests with Authorization are shared only when public, s-maxage or must-revalidate', async (t) => {
  const origin = await startOrigin((req, res) => {
    const cc = req.url === '/public' ? 'public, max-age=60' : req.url === '/smax' ? 's-maxage=60' : 'max-age=60';
    res.writeHead(200, { 'cache-control': cc });
    res.end(`user=${req.headers.authorization ?? 'anon'}`);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  await edge.get('/plain', { authorization: 'Bearer alice' });
  const bob = await edge.get('/plain', { authorization: 'Bearer bob' });
  t.equal(bob.body, 'user=Bearer bob', 'plain max-age answer to alice not reused');
  const anon = await edge.get('/plain');
  t.equal(anon.body, 'user=anon', 'nor served to an anonymous viewer');
  const anon2 = await edge.get('/plain', { authorization: 'Bearer carol' });
  t.equal(anon2.body, 'user=Bearer carol', 'the anonymous copy is not served to an authorized request');
  for (const path of ['/public', '/smax']) {
    await edge.get(path, { authorization: 'Bearer alice' });
    const again = await edge.get(path, { authorization: 'Bearer bob' });
    t.equal(again.headers['x-cache-status'], 'HIT', `${path} may be shared`);
    t.equal(origin.count(path), 1);
  }
});
