import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('private and no-store responses are never served to another client, even with a rule TTL', async (t) => {
  let n = 0;
  const origin = await startOrigin((req, res) => {
    n++;
    const cc = req.url === '/private' ? 'private, max-age=60' : req.url === '/nostore' ? 'no-store' : 'max-age=60';
    res.writeHead(200, { 'cache-control': cc, 'set-cookie': req.url === '/cookie' ? 'sid=secret' : [] });
    res.end(`for ${req.headers['x-user']} #${n}`);
  });
  const edge = await startAgent(snapshotFor(origin.port, { cache_rules: [{ id: 'all', ttl_seconds: 3600, match: { paths: ['/*'] } }] }));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const path of ['/private', '/nostore', '/cookie']) {
    const alice = await edge.get(path, { 'x-user': 'alice' });
    const bob = await edge.get(path, { 'x-user': 'bob' });
    t.match(alice.body, /^for alice/);
    t.match(bob.body, /^for bob/, `${path}: bob does not get alice's response`);
    t.equal(origin.count(path), 2);
  }
});
