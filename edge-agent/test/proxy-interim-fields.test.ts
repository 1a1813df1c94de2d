// Issue 25, item 7: interim responses (RFC 9110 §15.2). An origin's 102 and 103
// reach the viewer waiting on that fetch with all their fields, before the
// final response; they are never reused: a later request (a cache hit) and an
// HTTP/1.0 viewer get none.
import t from 'tap';
import { request } from 'undici';
import { rawRequest, startAgent, startOrigin, snapshotFor, HOST } from './helpers.ts';

t.test('RFC 9110 §15.2: 102 and 103 are forwarded with all their fields and never reused', async (t) => {
  const origin = await startOrigin((req, res) => {
    // node:http can send a 102 only without fields: write the interim heads as an origin would.
    req.socket.write('HTTP/1.1 102 Processing\r\nX-Progress: 10%\r\nConnection: x-hop\r\nX-Hop: dropped\r\n\r\n');
    req.socket.write('HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload; as=style\r\nX-Hint: a\r\nX-Hint: b\r\n\r\n');
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain', 'cache-control': 'max-age=300' });
      res.end(`final ${req.url}`);
    }, 20);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });

  const ask = async (path: string) => {
    const infos: { statusCode: number; headers: Record<string, string | string[]> }[] = [];
    const res = await request(`http://127.0.0.1:${edge.port}${path}`, { headers: { host: HOST }, onInfo: (i) => infos.push(i) });
    return { status: res.statusCode, body: await res.body.text(), cache: res.headers['x-cache-status'], infos };
  };
  const miss = await ask('/job');
  t.equal(miss.status, 200);
  t.equal(miss.body, 'final /job');
  t.same(miss.infos.map((i) => i.statusCode), [102, 103], 'both interim responses, in order');
  t.equal(miss.infos[0].headers['x-progress'], '10%', '102 with its field');
  t.equal(miss.infos[0].headers['x-hop'], undefined, 'a field the 102 listed in Connection is hop-by-hop: not forwarded');
  t.equal(miss.infos[1].headers.link, '</app.css>; rel=preload; as=style', '103 with its Link');
  t.same(miss.infos[1].headers['x-hint'], ['a', 'b'], '103 with its other fields, each line');

  const hit = await ask('/job');
  t.equal(hit.cache, 'HIT');
  t.same(hit.infos, [], 'a later request answered from cache gets no interim response');

  const forwarded = await ask('/other');
  t.same(forwarded.infos.map((i) => i.statusCode), [102, 103], 'another miss gets its own');

  const old = await rawRequest(edge.port, ['GET /old HTTP/1.0', `Host: ${HOST}`]);
  t.equal(old.status, 200, 'an HTTP/1.0 viewer gets the final response first (no 1xx)');
  t.equal(old.body, 'final /old');
});
