// Issue 25, item 6: must-understand (RFC 9111 §5.2.2.3). A response carrying it
// is stored only when the cache understands its status code, and then no-store
// is ignored; with a status the cache does not understand it is never stored.
import t from 'tap';
import { startAgent, startOrigin, snapshotFor } from './helpers.ts';

t.test('RFC 9111 §5.2.2.3: must-understand stores understood statuses despite no-store, and never others', async (t) => {
  const answers = new Map<string, [number, string]>([
    ['/ok', [200, 'no-store, must-understand, max-age=300']],
    ['/gone', [410, 'no-store, must-understand, max-age=300']],
    ['/odd', [299, 'no-store, must-understand, max-age=300']],
    ['/odd-without-no-store', [299, 'must-understand, max-age=300']],
    ['/odd-plain', [299, 'max-age=300']],
    ['/too-many', [429, 'must-understand, max-age=300']],
    ['/partial-shape', [200, 'no-store, max-age=300']],
  ]);
  const origin = await startOrigin((req, res) => {
    const [status, cc] = answers.get(req.url!)!;
    res.writeHead(status, { 'content-type': 'text/plain', 'cache-control': cc });
    res.end(req.url);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const expected: Record<string, 'HIT' | 'MISS'> = {
    '/ok': 'HIT', // understood: no-store ignored
    '/gone': 'HIT',
    '/odd': 'MISS', // 299: not a status this cache understands
    '/odd-without-no-store': 'MISS', // must-understand alone keeps it out
    '/odd-plain': 'HIT', // without must-understand, any final status with explicit freshness is stored
    '/too-many': 'MISS', // 429 is not an RFC 9110 status
    '/partial-shape': 'MISS', // no-store without must-understand
  };
  for (const [path, status] of Object.entries(expected)) {
    const first = await edge.get(path);
    t.equal(first.status, answers.get(path)![0]);
    const again = await edge.get(path);
    t.equal(again.headers['x-cache-status'], status, `${path} (${answers.get(path)!.join(', ')}): ${status}`);
    t.equal(origin.count(path), status === 'HIT' ? 1 : 2);
  }
});
