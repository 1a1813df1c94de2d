// Interim (1xx) responses: an origin's 103 Early Hints reach the viewer ahead of
// the final response, and a viewer's Expect: 100-continue gets its 100.
import t from 'tap';
import { request as httpRequest } from 'node:http';
import { request } from 'undici';
import { startAgent, startOrigin, snapshotFor, HOST } from './helpers.ts';

const LINK = '</style.css>; rel=preload; as=style';

t.test('103 Early Hints from the origin are forwarded, and the final response is intact and cached', async (t) => {
  const origin = await startOrigin((req, res) => {
    res.writeEarlyHints({ link: LINK });
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'max-age=60' });
      res.end(`page ${req.url}`);
    }, 20);
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  for (const [path, method] of [['/page', 'GET'], ['/form', 'POST']] as const) {
    const infos: { statusCode: number; headers: Record<string, string | string[]> }[] = [];
    const res = await request(`http://127.0.0.1:${edge.port}${path}`, { method, headers: { host: HOST }, body: method === 'POST' ? 'x=1' : undefined, onInfo: (i) => infos.push(i) });
    t.equal(res.statusCode, 200, `${method}: final status`);
    t.equal(await res.body.text(), `page ${path}`, `${method}: final body`);
    t.same(infos.map((i) => [i.statusCode, i.headers.link]), [[103, LINK]], `${method}: one 103 with the origin's Link`);
  }
  const hit = await edge.get('/page');
  t.equal(hit.headers['x-cache-status'], 'HIT', 'the response after the hints was stored');
  t.equal(hit.body, 'page /page');
});

t.test('a viewer sending Expect: 100-continue gets 100 Continue and its body reaches the origin', async (t) => {
  const origin = await startOrigin((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      res.writeHead(201, { 'content-type': 'text/plain', 'x-expect-seen': String(req.headers.expect ?? '') });
      res.end(`got ${body}`);
    });
  });
  const edge = await startAgent(snapshotFor(origin.port));
  t.teardown(async () => { await edge.close(); await origin.close(); });
  const result = await new Promise<{ continued: boolean; status: number; body: string; expectSeen: string }>((resolve, reject) => {
    let continued = false;
    const req = httpRequest({ host: '127.0.0.1', port: edge.port, method: 'POST', path: '/upload', headers: { host: HOST, expect: '100-continue', 'content-length': '5' } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ continued, status: res.statusCode!, body, expectSeen: String(res.headers['x-expect-seen']) }));
    });
    req.on('continue', () => {
      continued = true;
      req.end('hello');
    });
    req.on('error', reject);
  });
  t.ok(result.continued, '100 Continue received before the body was sent');
  t.equal(result.status, 201);
  t.equal(result.body, 'got hello');
  t.equal(result.expectSeen, '', 'Expect is not forwarded (the agent answered it)');
});
